#!/usr/bin/python3
"""Hugging Face's GPT2LMHeadModel and LlamaForCausalLM, rebuilt in plain
PyTorch with transformers' module structure, names and layouts (no
transformers library, no download), for tests/bench/hf_roundtrip.sh:

  init --arch gpt2|llama --spec S --out F [--seed N]
      A randomly initialised model of the spec's sizes, its state_dict
      written to F (safetensors, F32) as transformers saves it: GPT-2
      without the tied lm_head.weight and with the attention-mask buffers
      (attn.bias, attn.masked_bias) older versions kept.
  same A B
      Every tensor of B equals A's bit for bit (A's lm_head.weight taken
      from its embedding when A has none; A's buffers are not parameters).
  check --arch gpt2|llama --spec S --init F --trained T --aq_losses L
        [--steps 3] [--tolerance 1e-4]
      Loads F into the HF module as from_pretrained does, trains it --steps
      steps with torch_gpt.py's Trainer (the spec's data windows,
      optimizer and learning rate, as aq train-local), then loads T (aq hf
      export of aq train-local's result) into a fresh HF module with
      load_state_dict(strict=True) and compares: the logits of both on a
      batch of validation windows, every parameter, and each step's loss
      with aq train-local's. Exits 1 beyond --tolerance (relative).

GPT-2 here: Conv1D (weight [in, out], y = x @ W + b) for c_attn, c_proj and
c_fc, NewGELUActivation (the tanh approximation), the causal mask as a
non-persistent buffer, lm_head tied to wte. LLaMA: LlamaRMSNorm, rotary
embeddings in the rotate-half form (torch_gpt.rope_tables, HF's float32
tables), repeat_kv grouped-query attention, SwiGLU, no biases, lm_head
untied unless the spec ties it.
"""
import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402
from torch_gpt import get, f32  # noqa: E402


def model_sizes(spec):
    layers = spec["model"][0]["layers"]
    emb = get(layers[0], "token_embedding")
    head = layers[-1]
    sizes = {"vocab": int(get(emb, "vocab_size")), "dim": int(get(emb, "dim")),
             "tied": get(head, "tie_weight_to") is not None, "blocks": []}
    for l in layers:
        if "position_embedding" in l:
            sizes["positions"] = int(get(get(l, "position_embedding"), "context"))
        for kind in ("transformer_block", "llama_block"):
            if kind in l:
                sizes["blocks"].append(get(l, kind))
        if "layer_norm" in l:
            sizes["ln_eps"] = f32(get(get(l, "layer_norm"), "eps", 1e-5))
        if "rms_norm" in l:
            sizes["rms_eps"] = f32(get(get(l, "rms_norm"), "eps", 1e-6))
    return sizes


def build_gpt2(torch, sizes):
    nn, F = torch.nn, torch.nn.functional
    D, V = sizes["dim"], sizes["vocab"]

    class Conv1D(nn.Module):
        """transformers.pytorch_utils.Conv1D: weight [nx, nf]."""

        def __init__(self, nf, nx):
            super().__init__()
            self.nf = nf
            self.weight = nn.Parameter(torch.empty(nx, nf))
            self.bias = nn.Parameter(torch.zeros(nf))

        def forward(self, x):
            out = x.size()[:-1] + (self.nf,)
            x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
            return x.view(out)

    class NewGELUActivation(nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (
                x + 0.044715 * torch.pow(x, 3.0))))

    class GPT2Attention(nn.Module):
        def __init__(self, heads):
            super().__init__()
            n = sizes["positions"]
            self.register_buffer("bias", torch.tril(torch.ones(
                (n, n), dtype=torch.bool)).view(1, 1, n, n), persistent=False)
            self.register_buffer("masked_bias", torch.tensor(-1e4),
                                 persistent=False)
            self.heads = heads
            self.c_attn = Conv1D(3 * D, D)
            self.c_proj = Conv1D(D, D)

        def forward(self, x):
            B, T, C = x.shape
            hd = C // self.heads
            q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2)
                       for t in self.c_attn(x).split(D, dim=2))
            w = q @ k.transpose(-1, -2) / math.sqrt(hd)
            mask = self.bias[:, :, :T, :T]
            w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min))
            y = F.softmax(w, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class GPT2MLP(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.c_fc = Conv1D(inner, D)
            self.c_proj = Conv1D(D, inner)
            self.act = NewGELUActivation()

        def forward(self, x):
            return self.c_proj(self.act(self.c_fc(x)))

    class GPT2Block(nn.Module):
        def __init__(self, b):
            super().__init__()
            eps = f32(get(b, "eps", 1e-5))
            self.ln_1 = nn.LayerNorm(D, eps=eps)
            self.attn = GPT2Attention(int(get(b, "heads")))
            self.ln_2 = nn.LayerNorm(D, eps=eps)
            self.mlp = GPT2MLP(int(get(b, "mlp_hidden", 4 * D)))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, D)
            self.wpe = nn.Embedding(sizes["positions"], D)
            self.h = nn.ModuleList(GPT2Block(b) for b in sizes["blocks"])
            self.ln_f = nn.LayerNorm(D, eps=sizes["ln_eps"])

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.wte(ids) + self.wpe(pos)[None]
            for block in self.h:
                x = block(x)
            return self.ln_f(x)

    class GPT2LMHeadModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = GPT2Model()
            self.lm_head = nn.Linear(D, V, bias=False)
            if sizes["tied"]:
                self.lm_head.weight = self.transformer.wte.weight

        def forward(self, ids):  # ids: token ids (floats from the Trainer)
            return self.lm_head(self.transformer(ids.long()))

    return GPT2LMHeadModel()


def build_llama(torch, sizes):
    nn, F = torch.nn, torch.nn.functional
    D, V = sizes["dim"], sizes["vocab"]

    class LlamaRMSNorm(nn.Module):
        def __init__(self, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(D))
            self.variance_epsilon = eps

        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))

    class LlamaAttention(nn.Module):
        def __init__(self, b):
            super().__init__()
            self.heads = int(get(b, "heads"))
            self.kv_heads = int(get(b, "kv_heads", self.heads) or self.heads)
            self.hd = D // self.heads
            self.theta = f32(get(b, "rope_theta", 10000.0))
            self.q_proj = nn.Linear(D, D, bias=False)
            self.k_proj = nn.Linear(D, self.kv_heads * self.hd, bias=False)
            self.v_proj = nn.Linear(D, self.kv_heads * self.hd, bias=False)
            self.o_proj = nn.Linear(D, D, bias=False)

        def forward(self, x):
            B, T, _ = x.shape
            H, KV, hd = self.heads, self.kv_heads, self.hd
            q = self.q_proj(x).view(B, T, H, hd).transpose(1, 2)
            k = self.k_proj(x).view(B, T, KV, hd).transpose(1, 2)
            v = self.v_proj(x).view(B, T, KV, hd).transpose(1, 2)
            cos, sin = torch_gpt.rope_tables(torch, T, hd, self.theta)
            rot = lambda t: torch_gpt.rotate_half(torch, t)  # noqa: E731
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin

            def repeat_kv(t):  # transformers' repeat_kv
                n = H // KV
                return t[:, :, None].expand(B, KV, n, T, hd).reshape(
                    B, KV * n, T, hd)

            k, v = repeat_kv(k), repeat_kv(v)
            w = q @ k.transpose(2, 3) / math.sqrt(hd)
            mask = torch.full((T, T), float("-inf")).triu(1)
            y = F.softmax(w + mask, dim=-1, dtype=torch.float32) @ v
            return self.o_proj(y.transpose(1, 2).reshape(B, T, D))

    class LlamaMLP(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.gate_proj = nn.Linear(D, hidden, bias=False)
            self.up_proj = nn.Linear(D, hidden, bias=False)
            self.down_proj = nn.Linear(hidden, D, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self, b):
            super().__init__()
            eps = f32(get(b, "eps", 1e-6))
            self.input_layernorm = LlamaRMSNorm(eps)
            self.self_attn = LlamaAttention(b)
            self.post_attention_layernorm = LlamaRMSNorm(eps)
            self.mlp = LlamaMLP(int(get(b, "hidden")))

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    class LlamaModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, D)
            self.layers = nn.ModuleList(
                LlamaDecoderLayer(b) for b in sizes["blocks"])
            self.norm = LlamaRMSNorm(sizes["rms_eps"])

        def forward(self, ids):
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    class LlamaForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = LlamaModel()
            self.lm_head = nn.Linear(D, V, bias=False)
            if sizes["tied"]:
                self.lm_head.weight = self.model.embed_tokens.weight

        def forward(self, ids):
            return self.lm_head(self.model(ids.long()))

    return LlamaForCausalLM()


def build(torch, arch, spec):
    sizes = model_sizes(spec)
    return (build_gpt2 if arch == "gpt2" else build_llama)(torch, sizes)


def randomise(torch, model, seed, scale):
    """Every parameter away from its usual init (biases and norm weights
    too), so that a misplaced or untransposed tensor shows; weights
    N(0, scale^2), large enough (0.1) that the MLP's inputs reach where the
    two GELUs differ (with 0.02 exact GELU's logits are within 5e-6 of the
    tanh form's)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            norm = "ln_" in name or "norm" in name
            if p.dim() == 1 and norm and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(scale * noise)


def write_safetensors(path, tensors, torch):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().float()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def raw_tensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"],
                body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


EMBEDDING = {"gpt2": "transformer.wte.weight",
             "llama": "model.embed_tokens.weight"}


def is_buffer(name):
    return name.endswith((".attn.bias", ".attn.masked_bias",
                          ".rotary_emb.inv_freq"))


def load_pretrained(torch, model, path, arch):
    """As from_pretrained: buffers skipped, a missing tied lm_head taken
    from the embedding; every parameter present, nothing unknown."""
    tensors = {k: v for k, v in torch_gpt.read_safetensors(path, torch).items()
               if not is_buffer(k)}
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors[EMBEDDING[arch]]
    model.load_state_dict(tensors, strict=True)


def cmd_init(a, torch):
    spec = torch_gpt.load_spec(a.spec)
    model = build(torch, a.arch, spec)
    randomise(torch, model, a.seed, a.scale)
    sd = dict(model.state_dict())
    if a.arch == "gpt2":
        if model_sizes(spec)["tied"]:
            del sd["lm_head.weight"]  # save_pretrained drops the tied copy
        n = model_sizes(spec)["positions"]
        for i in range(len(model.transformer.h)):
            sd["transformer.h.%d.attn.bias" % i] = torch.tril(
                torch.ones(n, n)).view(1, 1, n, n)
            sd["transformer.h.%d.attn.masked_bias" % i] = torch.tensor(-1e4)
    write_safetensors(a.out, sd, torch)
    print("%s: %s, %d tensors, %d parameters" % (
        a.out, type(model).__name__, len(sd),
        sum(p.numel() for p in model.parameters())))
    return 0


def cmd_same(a):
    orig, back = raw_tensors(a.a), raw_tensors(a.b)
    arch = "gpt2" if EMBEDDING["gpt2"] in orig else "llama"
    if "lm_head.weight" not in orig:
        orig["lm_head.weight"] = orig[EMBEDDING[arch]]
    params = {k for k in orig if not is_buffer(k)}
    bad = [k for k in sorted(params | set(back))
           if k not in orig or k not in back or orig[k] != back[k]]
    print("%s -> aq hf import -> aq hf export: %d of %d tensors "
          "bit-identical%s" % (a.a, len(params) - len(bad), len(params),
                               "" if not bad else "; differ: %s" % bad[:5]))
    return 1 if bad else 0


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def print_parameters(arch, got, ref):
    """The parameters' largest difference (max |diff| / max |ref| per
    tensor), for information: Adam turns a gradient of rounding noise into a
    full step, so a parameter whose exact gradient is zero (the key third
    of GPT-2's c_attn.bias: softmax ignores a constant added to every
    score of a row) may differ by up to lr; shown with and without it."""
    diffs = sorted((rel(p, ref[n]), n) for n, p in got.items())
    print("%s: parameters: max rel diff %.2e (%s)" % (arch, *diffs[-1]))
    if arch == "gpt2":
        worst = 0.0
        for n, p in got.items():
            if n.endswith("attn.c_attn.bias"):
                d = p.shape[0] // 3  # q, k, v: leave k out
                keep = list(range(d)) + list(range(2 * d, 3 * d))
                worst = max(worst, rel(p[keep], ref[n][keep]))
            else:
                worst = max(worst, rel(p, ref[n]))
        print("%s: parameters without c_attn.bias's key third: max rel diff "
              "%.2e" % (arch, worst))


def cmd_check(a, torch):
    ns = argparse.Namespace(spec=a.spec, threads=a.threads, torch_seed=1,
                            attention="manual", init=None, device="cpu")
    tr = torch_gpt.Trainer(ns, torch)  # the data, optimizer and lr
    if tr.groups is not None:
        sys.exit("check: param_groups are not mirrored here")
    ref = build(torch, a.arch, tr.spec)
    load_pretrained(torch, ref, a.init, a.arch)
    tr.model, tr.params = ref, list(ref.parameters())
    tr.opt = type(tr.opt)(tr.params, **tr.opt.defaults)
    aq = torch_gpt.read_aq_losses(a.aq_losses)
    worst_loss = 0.0
    print("%5s %12s %12s %10s" % ("step", "aqueduct", "pytorch-hf", "rel diff"))
    for m in range(a.steps):
        t = tr.step(m, a.steps)
        d = abs(aq[m] - t) / abs(t)
        worst_loss = max(worst_loss, d)
        print("%5d %12.7f %12.7f %10.2e" % (m + 1, aq[m], t, d))
    got = build(torch, a.arch, tr.spec)
    got.load_state_dict(torch_gpt.read_safetensors(a.trained, torch),
                        strict=True)
    x, _ = tr.batch_of(tr.data.val_starts()[:8])
    ref.eval()
    got.eval()
    with torch.no_grad():
        out = got(x)
        logits = rel(out, ref(x))
    ok = max(logits, worst_loss) <= a.tolerance
    print_parameters(a.arch, got.state_dict(), ref.state_dict())
    print("%s: exported model (load_state_dict strict) vs the HF-layout "
          "module trained %d steps in PyTorch: logits [%s] max rel diff "
          "%.2e, losses %.2e: %s (tolerance %.0e)" % (
              a.arch, a.steps, "x".join(map(str, out.shape)), logits,
              worst_loss, "OK" if ok else "MISMATCH", a.tolerance))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["init", "same", "check"])
    p.add_argument("a", nargs="?")
    p.add_argument("b", nargs="?")
    p.add_argument("--arch", choices=["gpt2", "llama"])
    p.add_argument("--spec")
    p.add_argument("--out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--init")
    p.add_argument("--trained")
    p.add_argument("--aq_losses")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    if a.mode == "same":
        return cmd_same(a)
    import torch
    return {"init": cmd_init, "check": cmd_check}[a.mode](a, torch)


if __name__ == "__main__":
    sys.exit(main())
