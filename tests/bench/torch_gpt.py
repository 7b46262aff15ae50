#!/usr/bin/python3
"""PyTorch reference for Aqueduct's GPT and LLaMA layers.

Builds, from an Aqueduct job spec, the same model, data pipeline, optimizer
and learning-rate schedule in PyTorch (CPU, float32), to check Aqueduct's
training against it and to compare speed and accuracy. Modes:

  equivalence --spec S --init INIT.safetensors --aq_losses LOSSES.json
              [--steps 50] [--threads 2] [--tolerance 1e-4]
      Loads the initial weights Aqueduct used (aq train-local S --max_steps 0
      --save_weights INIT), trains --steps steps and compares each step's
      mean loss with Aqueduct's (the "loss" array of aq train-local S
      --init_weights INIT --max_steps STEPS --output json). Prints every
      step, the maximum relative difference |aq - torch| / |torch|, and
      exits 1 when it exceeds the tolerance. Needs dropout 0 in the spec.
  accuracy --spec S --steps N [--init INIT] [--threads T]
      Trains N steps (the schedule spans N steps, as aq train-local
      --max_steps N) and prints the validation loss over the same
      validation windows as JSON. Without --init, PyTorch initialises the
      parameters as Aqueduct does in distribution (weights N(0, 0.02),
      biases 0, LayerNorm 1 and 0, RMSNorm 1), not in value.
  speed --spec S --steps N [--warmup 5] [--threads T]
      Tokens/s of the training step (batch gather, forward, backward, Adam
      step, loss read back), over --steps steps after --warmup steps. One
      JSON line. (aq train-local --max_steps N excludes its first 5 steps:
      pass --warmup 5 --steps N-5 to time the same steps.)
  selftest
      Checks SplitMix64 and the window function against the values
      hard-coded in worker/data/text_test.cc; no torch needed.
  layertest
      Checks (torch needed) the LLaMA pieces against plain
      re-implementations in float64 (RMSNorm, RoPE pair by pair, grouped-
      query attention head by head, the whole llama_block), the parameter
      kinds of param_groups, gradient accumulation and clipping.

The spec: text format (proto/job.proto; a small parser below reads it) or
protobuf JSON. Read: model.layers (token_embedding, position_embedding,
transformer_block, causal_self_attention, layer_norm, rms_norm,
llama_block, linear, gelu, relu, dropout; tie_weight_to; a
transformer_block's activation: "gelu_tanh" is F.gelu(approximate="tanh")), data.text (files,
context, tokenizer, val_fraction, val_windows), optimizer (adam, adamw or
sgd, schedule, param_groups, clip_grad_norm), batch_size,
grad_accumulation, max_steps, seed. Weights: safetensors parsed here
(F32/F16/BF16), names "layers.<i>.<param>" (docs/weights.md): the model
below is a ModuleList named layers whose state_dict names are Aqueduct's.

Semantics mirrored (worker/data/text.h, worker/nn/optimizer.cc):
  * corpus: the files read whole and concatenated; "chars" = sorted distinct
    code points (id = rank), "bytes" = byte values;
  * split: val = floor(total * float32(val_fraction) + 0.5), train = rest;
  * training row r of minibatch m starts at
    splitmix64(splitmix64(splitmix64(seed) ^ m) ^ r) % (train - context);
  * validation: non-overlapping windows of the held-out tail, count
    (val - 1) // context, capped at val_windows when positive; the loss is
    the mean token loss over them;
  * loss: token-level cross-entropy, mean over batch * context tokens;
  * Adam: torch.optim.Adam (L2 weight decay in the gradient); AdamW:
    torch.optim.AdamW (decoupled decay; weight_decay 0 when unset, not
    torch's 0.01); lr per step = float32(float32(lr) * lr_scale *
    LearningRateFactor(schedule, step, total steps)), lr_scale 1 outside
    param groups;
  * param_groups: real torch param groups; a parameter's kind is
    "embedding" (token/position tables, and a layer tied to one),
    "norm" (layer_norm, rms_norm, transformer_block ln_1/ln_2, llama_block
    input_layernorm/post_attention_layernorm: weights and biases), "bias"
    (other biases) or "weight"; it takes the first group naming its kind
    (that group's weight_decay and lr_scale where set), else the
    optimizer's own values;
  * clip_grad_norm C > 0: torch.nn.utils.clip_grad_norm_(parameters, C),
    each parameter once, before every step;
  * grad_accumulation N: the minibatch's rows (the same windows) run as N
    consecutive chunks of batch_size / N rows; each chunk's mean token loss
    / N is backpropagated, the gradients add up, then clip, then one step;
    the step's loss is the mean over all the minibatch's tokens;
  * tied head: lm_head.weight IS the embedding's weight (one parameter;
    Aqueduct sums the two copies' gradients, which is the same);
  * llama_block: Hugging Face's LlamaDecoderLayer without biases: RMSNorm
    x * rsqrt(mean(x^2) + eps) * weight, RoPE in the rotate-half form with
    HF's float32 tables (inv_freq = 1 / theta^(arange(0, hd, 2) / hd),
    emb = cat(t * inv_freq, t * inv_freq)), grouped-query attention (query
    head h reads key/value head h // (heads // kv_heads)), causal softmax
    scaled by 1/sqrt(hd), SwiGLU MLP down(silu(gate(h)) * up(h)).
"""
import argparse
import json
import math
import os
import re
import struct
import sys
import time

# ---------------------------------------------------------------- the spec


def _tokens(text):
    pat = re.compile(r'''\s+|\#[^\n]*|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|
                         ([{}<>:\[\],;])|([^\s{}<>:\[\],;"'\#]+)''', re.X)
    pos = 0
    while pos < len(text):
        m = pat.match(text, pos)
        if not m:
            raise ValueError("cannot parse the spec at: %r" % text[pos:pos + 30])
        pos = m.end()
        if m.group(1) is not None:
            yield ("str", m.group(1))
        elif m.group(2) is not None:
            yield ("punct", m.group(2))
        elif m.group(3) is not None:
            yield ("word", m.group(3))


def _scalar(kind, text):
    if kind == "str":
        body = text[1:-1]
        return body.encode("latin-1", "backslashreplace").decode(
            "unicode_escape") if "\\" in body else body
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text.rstrip("fF"))
    except ValueError:
        return text  # An enum name.


def parse_textproto(text):
    """Protobuf text format -> {field: [values]}, messages as dicts."""
    toks = list(_tokens(text))
    pos = 0

    def message(end):
        nonlocal pos
        out = {}
        while pos < len(toks):
            kind, val = toks[pos]
            if kind == "punct" and val == end:
                pos += 1
                return out
            if kind == "punct" and val in ",;":
                pos += 1
                continue
            name = val
            pos += 1
            if toks[pos] == ("punct", ":"):
                pos += 1
            kind, val = toks[pos]
            if kind == "punct" and val in "{<":
                pos += 1
                out.setdefault(name, []).append(
                    message("}" if val == "{" else ">"))
            elif kind == "punct" and val == "[":
                pos += 1
                while toks[pos] != ("punct", "]"):
                    if toks[pos] != ("punct", ","):
                        out.setdefault(name, []).append(_scalar(*toks[pos]))
                    pos += 1
                pos += 1
            else:
                # Adjacent strings concatenate.
                v = _scalar(kind, val)
                pos += 1
                while kind == "str" and pos < len(toks) and toks[pos][0] == "str":
                    v += _scalar(*toks[pos])
                    pos += 1
                out.setdefault(name, []).append(v)
        if end is not None:
            raise ValueError("unterminated message in the spec")
        return out

    return message(None)


def _from_json(obj):
    snake = lambda k: re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            vals = v if isinstance(v, list) else [v]
            out[snake(k)] = [_from_json(x) for x in vals]
        return out
    if isinstance(obj, str) and re.fullmatch(r"-?\d+", obj):
        return int(obj)  # int64 fields are strings in protobuf JSON.
    return obj


def load_spec(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{") and path.endswith(".json"):
        return _from_json(json.loads(text))
    return parse_textproto(text)


def get(msg, name, default=None):
    vals = msg.get(name) if msg else None
    return vals[0] if vals else default


def f32(x):
    """x rounded to float32 (a proto float field), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


# ------------------------------------------------------------ the text data

M64 = 2**64 - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def window_start(seed, minibatch, row, windows):
    return splitmix64(splitmix64(splitmix64(seed & M64) ^ minibatch) ^ row) % windows


class TextData:
    """The corpus of a spec's data.text, its split and its windows."""

    def __init__(self, text_spec, seed):
        files = text_spec.get("files", [])
        if not files:
            raise ValueError("data.text has no files")
        self.context = int(get(text_spec, "context"))
        self.tokenizer = get(text_spec, "tokenizer", "") or "chars"
        raw = b"".join(open(p, "rb").read() for p in files)
        if self.tokenizer == "bytes":
            self.vocab = 256
            self.tokens = list(raw)
        elif self.tokenizer == "chars":
            text = raw.decode("utf-8")  # strict, as Aqueduct
            self.alphabet = sorted(set(text))
            rank = {c: i for i, c in enumerate(self.alphabet)}
            self.vocab = len(self.alphabet)
            self.tokens = [rank[c] for c in text]
        else:
            raise ValueError("unknown tokenizer %r" % self.tokenizer)
        self.val_fraction = f32(get(text_spec, "val_fraction", 0.1))
        total = len(self.tokens)
        self.val_tokens = math.floor(total * self.val_fraction + 0.5)
        self.train_tokens = total - self.val_tokens
        self.windows = self.train_tokens - self.context
        if self.windows <= 0:
            raise ValueError("too few training tokens for context %d" %
                             self.context)
        n_val = (self.val_tokens - 1) // self.context if self.val_tokens else 0
        cap = int(get(text_spec, "val_windows", 0))
        self.val_windows = min(n_val, cap) if cap > 0 else n_val
        self.seed = int(seed)

    def batch_starts(self, minibatch, batch):
        return [window_start(self.seed, minibatch, r, self.windows)
                for r in range(batch)]

    def val_starts(self):
        return [self.train_tokens + i * self.context
                for i in range(self.val_windows)]


def lr_factor(schedule, step, total_steps):
    """worker/nn/optimizer.cc's LearningRateFactor, to the letter."""
    warmup = int(get(schedule, "warmup_steps", 0))
    if step < warmup:
        return (step + 1) / warmup
    t = step - warmup
    span = max(1, total_steps - warmup)
    cosine = get(schedule, "cosine")
    if cosine is not None:
        progress = min(1.0, t / max(1, span - 1))
        f = f32(get(cosine, "final_fraction", 0.0))
        return f + (1 - f) * 0.5 * (1 + math.cos(math.pi * progress))
    stepd = get(schedule, "step")
    if stepd is not None:
        return float(f32(get(stepd, "gamma", 0.0))) ** (
            t // int(get(stepd, "every_steps")))
    return 1.0


def selftest():
    # worker/data/text_test.cc, WindowStartsAreTheDocumentedFunction.
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(1) == 0x910A2DEC89025CC1
    assert window_start(0, 0, 0, 1000) == 433
    assert window_start(0, 0, 1, 1000) == 824
    assert window_start(1, 0, 0, 1000) == 595
    assert window_start(42, 7, 3, 1000000) == 242809
    assert window_start(42, 7, 4, 1000000) == 443032
    assert window_start(12345, 100000, 63, 9999991) == 257436
    assert window_start(M64, 1 << 40, 5, (1 << 40) + 7) == 512876134626
    # text_test.cc, SplitSizes.
    split = lambda total, f: math.floor(total * f32(f) + 0.5)
    assert split(1000, 0.1) == 100 and split(1005, 0.1) == 101
    assert split(1004, 0.1) == 100 and split(1000, 0.35) == 350
    assert split(7, 0.5) == 4
    # A textproto round.
    s = parse_textproto('a { b: 1 c: "x\\ty" } a { b: -2.5e-1 } d: [1, 2]'
                        ' e: true # comment\n f <g: ENUM>')
    assert s == {"a": [{"b": [1], "c": ["x\ty"]}, {"b": [-0.25]}],
                 "d": [1, 2], "e": [True], "f": [{"g": ["ENUM"]}]}, s
    print("selftest: ok")


# ----------------------------------------------------------------- the model


def build_model(spec, torch, attention="auto"):
    nn = torch.nn
    F = torch.nn.functional

    def linear(i, o, bias=True):
        return nn.Linear(i, o, bias=bias)

    def sdpa_ok():
        return attention != "manual" and hasattr(F, "scaled_dot_product_attention")

    class TokenEmbedding(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(vocab, dim))

        def forward(self, ids):
            return F.embedding(ids.long(), self.weight)

    class PositionEmbedding(nn.Module):
        def __init__(self, context, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(context, dim))

        def forward(self, x):
            return x + self.weight[: x.shape[-2]]

    class CausalSelfAttention(nn.Module):
        def __init__(self, dim, heads, dropout, bias):
            super().__init__()
            assert dim % heads == 0
            self.c_attn = linear(dim, 3 * dim, bias)
            self.c_proj = linear(dim, dim, bias)
            self.heads, self.dim, self.p = heads, dim, dropout
            self.attn_dropout = nn.Dropout(dropout)
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(self.dim, dim=2)
            hd = C // self.heads
            q = q.view(B, T, self.heads, hd).transpose(1, 2)
            k = k.view(B, T, self.heads, hd).transpose(1, 2)
            v = v.view(B, T, self.heads, hd).transpose(1, 2)
            if sdpa_ok():
                y = F.scaled_dot_product_attention(
                    q, k, v, dropout_p=self.p if self.training else 0.0,
                    is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                mask = torch.ones(T, T, dtype=torch.bool, device=att.device).tril()
                att = att.masked_fill(~mask, float("-inf"))
                att = self.attn_dropout(F.softmax(att, dim=-1))
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, dim, hidden, dropout, bias, approximate="none"):
            super().__init__()
            self.c_fc = linear(dim, hidden, bias)
            self.c_proj = linear(hidden, dim, bias)
            self.dropout = nn.Dropout(dropout)
            self.approximate = approximate

        def forward(self, x):
            return self.dropout(self.c_proj(
                F.gelu(self.c_fc(x), approximate=self.approximate)))

    class Block(nn.Module):
        def __init__(self, dim, heads, dropout, hidden, bias, eps,
                     approximate="none"):
            super().__init__()
            self.ln_1 = nn.LayerNorm(dim, eps=eps)
            self.attn = CausalSelfAttention(dim, heads, dropout, bias)
            self.ln_2 = nn.LayerNorm(dim, eps=eps)
            self.mlp = MLP(dim, hidden, dropout, bias, approximate)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class RMSNorm(nn.Module):
        """LlamaRMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight."""

        def __init__(self, dim, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.eps))

    class LlamaAttention(nn.Module):
        def __init__(self, dim, heads, kv_heads, theta):
            super().__init__()
            assert dim % heads == 0 and heads % kv_heads == 0
            self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
            assert self.hd % 2 == 0
            self.theta = theta
            self.q_proj = linear(dim, dim, False)
            self.k_proj = linear(dim, kv_heads * self.hd, False)
            self.v_proj = linear(dim, kv_heads * self.hd, False)
            self.o_proj = linear(dim, dim, False)
            self._rope = {}

        def forward(self, x):
            B, T, C = x.shape
            H, KV, hd = self.heads, self.kv_heads, self.hd
            q = self.q_proj(x).view(B, T, H, hd).transpose(1, 2)
            k = self.k_proj(x).view(B, T, KV, hd).transpose(1, 2)
            v = self.v_proj(x).view(B, T, KV, hd).transpose(1, 2)
            key = (T, str(x.device))
            if key not in self._rope:
                cos, sin = rope_tables(torch, T, hd, self.theta)
                self._rope[key] = (cos.to(x.device), sin.to(x.device))
            cos, sin = self._rope[key]
            q = q * cos + rotate_half(torch, q) * sin
            k = k * cos + rotate_half(torch, k) * sin
            if H != KV:  # Query head h reads kv head h // (H // KV).
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            if sdpa_ok():
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                mask = torch.ones(T, T, dtype=torch.bool,
                                  device=att.device).tril()
                att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
                y = att @ v
            return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class LlamaMLP(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.gate_proj = linear(dim, hidden, False)
            self.up_proj = linear(dim, hidden, False)
            self.down_proj = linear(hidden, dim, False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class LlamaBlock(nn.Module):
        """Hugging Face's LlamaDecoderLayer (no biases, no dropout)."""

        def __init__(self, dim, heads, kv_heads, hidden, theta, eps):
            super().__init__()
            self.input_layernorm = RMSNorm(dim, eps)
            self.self_attn = LlamaAttention(dim, heads, kv_heads, theta)
            self.post_attention_layernorm = RMSNorm(dim, eps)
            self.mlp = LlamaMLP(dim, hidden)

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    class Lambda(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    layers, ties, dropout_max = [], {}, 0.0
    for i, l in enumerate(spec["model"][0].get("layers", [])):
        if get(l, "tie_weight_to") is not None:
            ties[i] = int(get(l, "tie_weight_to"))
        if "token_embedding" in l:
            s = get(l, "token_embedding")
            m = TokenEmbedding(int(get(s, "vocab_size")), int(get(s, "dim")))
        elif "position_embedding" in l:
            s = get(l, "position_embedding")
            m = PositionEmbedding(int(get(s, "context")), int(get(s, "dim")))
        elif "transformer_block" in l:
            s = get(l, "transformer_block")
            dim = int(get(s, "dim"))
            p = f32(get(s, "dropout", 0.0))
            dropout_max = max(dropout_max, p)
            act = get(s, "activation", "") or "gelu"
            if act not in ("gelu", "gelu_tanh"):
                raise ValueError("layer %d: transformer_block.activation %r"
                                 % (i, act))
            m = Block(dim, int(get(s, "heads")), p,
                      int(get(s, "mlp_hidden", 4 * dim)),
                      bool(get(s, "bias", True)), f32(get(s, "eps", 1e-5)),
                      "tanh" if act == "gelu_tanh" else "none")
        elif "causal_self_attention" in l:
            s = get(l, "causal_self_attention")
            p = f32(get(s, "dropout", 0.0))
            dropout_max = max(dropout_max, p)
            m = CausalSelfAttention(int(get(s, "dim")), int(get(s, "heads")),
                                    p, bool(get(s, "bias", True)))
        elif "llama_block" in l:
            s = get(l, "llama_block")
            heads = int(get(s, "heads"))
            m = LlamaBlock(int(get(s, "dim")), heads,
                           int(get(s, "kv_heads", heads) or heads),
                           int(get(s, "hidden")),
                           f32(get(s, "rope_theta", 10000.0)),
                           f32(get(s, "eps", 1e-6)))
        elif "rms_norm" in l:
            s = get(l, "rms_norm")
            m = RMSNorm(int(get(s, "dim")), f32(get(s, "eps", 1e-6)))
        elif "layer_norm" in l:
            s = get(l, "layer_norm")
            m = nn.LayerNorm(int(get(s, "normalized_shape")),
                             eps=f32(get(s, "eps", 1e-5)))
        elif "linear" in l:
            s = get(l, "linear")
            m = linear(int(get(s, "in_features")), int(get(s, "out_features")),
                       bool(get(s, "bias", True)))
        elif "gelu" in l:
            m = Lambda(F.gelu)
        elif "relu" in l:
            m = Lambda(F.relu)
        elif "dropout" in l:
            p = f32(get(get(l, "dropout"), "p", 0.0))
            dropout_max = max(dropout_max, p)
            m = nn.Dropout(p)
        else:
            raise ValueError("layer %d: kind %s is not supported here" %
                             (i, sorted(k for k in l if k != "name")))
        layers.append(m)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(layers)
            # nanoGPT's init as Aqueduct does it (transformer.h): weights
            # N(0, 0.02) (c_proj too), biases 0, LayerNorm 1 and 0;
            # RMSNorm 1 (Hugging Face's LLaMA init).
            for name, p in self.named_parameters():
                with torch.no_grad():
                    if isinstance(self._owner(name), RMSNorm):
                        p.fill_(1.0)
                    elif isinstance(self._owner(name), nn.LayerNorm):
                        p.fill_(1.0 if name.endswith("weight") else 0.0)
                    elif name.endswith("bias"):
                        p.zero_()
                    else:
                        p.normal_(0.0, 0.02)
            for i, j in ties.items():
                self.layers[i].weight = self.layers[j].weight

        def _owner(self, name):
            mod = self
            for part in name.split(".")[:-1]:
                mod = getattr(mod, part)
            return mod

        def forward(self, x):
            for l in self.layers:
                x = l(x)
            return x

        def param_kinds(self):
            """{id(parameter): kind} for ParamGroup.kinds: "embedding",
            "norm", "bias" or "weight" (worker/nn/optimizer.cc,
            ParamKindOf); a tied layer's weight is its owner's, the one
            Parameter."""
            kinds = {}
            for name, p in self.state_dict(keep_vars=True).items():
                i = int(name.split(".")[1])
                if i in ties and name == "layers.%d.weight" % i:
                    continue  # The owner's parameter: classified there.
                owner = self._owner(name)
                if isinstance(self.layers[i], (TokenEmbedding,
                                               PositionEmbedding)):
                    kinds[id(p)] = "embedding"
                elif isinstance(owner, (nn.LayerNorm, RMSNorm)):
                    kinds[id(p)] = "norm"
                elif name.endswith(".bias"):
                    kinds[id(p)] = "bias"
                else:
                    kinds[id(p)] = "weight"
            return kinds

    model = GPT()
    model.ties = ties
    model.dropout_max = dropout_max
    return model


def rope_tables(torch, T, hd, theta):
    """cos and sin [T, hd] of Hugging Face's LlamaRotaryEmbedding (float32:
    inv_freq = 1 / theta^(arange(0, hd, 2) / hd), emb = cat(f, f))."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64)
                                .float() / hd))
    t = torch.arange(T, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(torch, x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


# ------------------------------------------------------------- safetensors


def read_safetensors(path, torch):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    dtypes = {"F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in dtypes:
            raise ValueError("%s: %s has dtype %s" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        buf = bytearray(body[a:b])
        v = torch.frombuffer(buf, dtype=dtypes[t["dtype"]]) if b > a else \
            torch.empty(0, dtype=dtypes[t["dtype"]])
        if sys.byteorder != "little":
            v = v.byteswap()
        out[name] = v.reshape(t["shape"]).float()
    return out


def load_weights(model, path, torch):
    tensors = read_safetensors(path, torch)
    # Every name, the tied head's too (it shares the embedding's tensor).
    params = dict(model.state_dict(keep_vars=True))
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError("%s does not match the model: missing %s, unknown %s"
                         % (path, missing, extra))
    with torch.no_grad():
        for name, p in params.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError("%s: %s is %s, the model's %s" % (
                    path, name, list(tensors[name].shape), list(p.shape)))
        for name, p in params.items():
            i = int(name.split(".")[1])
            if i in model.ties and name == "layers.%d.weight" % i:
                continue  # The tied copy: checked below.
            p.copy_(tensors[name])
        for i, j in model.ties.items():
            a, b = tensors["layers.%d.weight" % i], tensors["layers.%d.weight" % j]
            if not torch.equal(a, b):
                print("warning: tied layers.%d.weight differs from "
                      "layers.%d.weight in %s (max |diff| %g); using the "
                      "latter" % (i, j, path, (a - b).abs().max().item()),
                      file=sys.stderr)


# ------------------------------------------------------------------ training


class Trainer:
    def __init__(self, args, torch):
        self.torch = torch
        self.spec = load_spec(args.spec)
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.torch_seed)
        text = get(get(self.spec, "data"), "text")
        if text is None:
            raise ValueError("%s: not a text job (data.text)" % args.spec)
        self.data = TextData(text, get(self.spec, "seed", 0))
        self.batch = int(get(self.spec, "batch_size"))
        self.model = build_model(self.spec, torch, args.attention)
        self.device = torch.device(getattr(args, "device", "cpu"))
        self.tokens = torch.tensor(self.data.tokens, dtype=torch.int64,
                                   device=self.device)
        self.ctx = self.data.context
        if args.init:
            load_weights(self.model, args.init, torch)
        self.model.to(self.device)
        opt = get(self.spec, "optimizer")
        self.schedule = get(opt, "schedule", {})
        self.params = list(self.model.parameters())  # Tied: counted once.
        self.groups = self.param_groups(opt)
        params = self.groups if self.groups is not None else self.params
        if "adam" in opt or "adamw" in opt:
            a = get(opt, "adam") if "adam" in opt else get(opt, "adamw")
            self.base_lr = f32(get(a, "lr"))
            cls = torch.optim.Adam if "adam" in opt else torch.optim.AdamW
            self.opt = cls(
                params, lr=self.base_lr,
                betas=(f32(get(a, "beta1", 0.9)), f32(get(a, "beta2", 0.999))),
                eps=f32(get(a, "eps", 1e-8)),
                weight_decay=f32(get(a, "weight_decay", 0.0)))
        elif "sgd" in opt:
            s = get(opt, "sgd")
            self.base_lr = f32(get(s, "lr"))
            self.opt = torch.optim.SGD(
                params, lr=self.base_lr, momentum=f32(get(s, "momentum", 0)),
                dampening=f32(get(s, "dampening", 0)),
                weight_decay=f32(get(s, "weight_decay", 0)),
                nesterov=bool(get(s, "nesterov", False)))
        else:
            raise ValueError("no optimizer in the spec")
        self.clip = f32(get(opt, "clip_grad_norm", 0.0))
        if self.clip < 0:
            raise ValueError("optimizer.clip_grad_norm must be >= 0")
        self.accum = int(get(self.spec, "grad_accumulation", 1) or 1)
        if self.accum < 1 or self.batch % self.accum:
            raise ValueError("grad_accumulation %d must divide batch_size %d"
                             % (self.accum, self.batch))
        self.offsets = torch.arange(self.ctx + 1, device=self.device)

    KINDS = ("weight", "bias", "norm", "embedding")

    def param_groups(self, opt):
        """torch param groups of optimizer.param_groups (None without):
        each parameter in the first group naming its kind, with that
        group's weight_decay where set and an "lr_scale" (1 when unset);
        the rest in a group of the optimizer's own values."""
        specs = opt.get("param_groups", [])
        if not specs:
            return None
        kinds = self.model.param_kinds()
        groups = []
        for g in specs:
            bad = [k for k in g.get("kinds", []) if k not in self.KINDS]
            if bad:
                raise ValueError("param_groups: unknown kinds %s (known: %s)"
                                 % (bad, list(self.KINDS)))
            d = {"params": [], "kinds": list(g.get("kinds", [])),
                 "lr_scale": f32(get(g, "lr_scale", 1.0))}
            if get(g, "weight_decay") is not None:
                d["weight_decay"] = f32(get(g, "weight_decay"))
            groups.append(d)
        rest = {"params": [], "kinds": ["(rest)"], "lr_scale": 1.0}
        for p in self.params:
            for d in groups:
                if kinds[id(p)] in d["kinds"]:
                    d["params"].append(p)
                    break
            else:
                rest["params"].append(p)
        return [d for d in groups + [rest] if d["params"]]

    def describe_groups(self):
        if self.groups is None:
            return "one group"
        names = {id(p): n for n, p in self.model.named_parameters()}
        out = []
        for g in self.opt.param_groups:
            out.append("%s: %d tensors (%d values), weight_decay %g, "
                       "lr_scale %g" % (
                           "/".join(g["kinds"]), len(g["params"]),
                           sum(p.numel() for p in g["params"]),
                           g["weight_decay"], g["lr_scale"]))
            out.append("    " + " ".join(names[id(p)] for p in g["params"]))
        return "\n  ".join(out)

    def batch_of(self, starts):
        idx = self.torch.tensor(starts, dtype=self.torch.int64,
                                device=self.device)[:, None] + \
            self.offsets
        w = self.tokens[idx]
        # Token ids enter the model as floats, as in Aqueduct.
        return w[:, :-1].float(), w[:, 1:]

    def loss_of(self, x, y):
        logits = self.model(x)
        return self.torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def step(self, m, total_steps):
        factor = lr_factor(self.schedule, m, total_steps)
        for g in self.opt.param_groups:
            # worker/nn/optimizer.cc ScaledLr: float(lr * lr_scale * factor).
            g["lr"] = f32(self.base_lr * g.get("lr_scale", 1.0) * factor)
        value = self.gradients(m)
        self.opt.step()
        return value

    def gradients(self, m):
        """Minibatch m's gradients (accumulated, clipped) in .grad; returns
        its mean token loss."""
        x, y = self.batch_of(self.data.batch_starts(m, self.batch))
        self.opt.zero_grad(set_to_none=True)
        if self.accum == 1:
            loss = self.loss_of(x, y)
            loss.backward()
            value = loss.item()
        else:
            rows, value = self.batch // self.accum, 0.0
            for i in range(self.accum):
                part = slice(i * rows, (i + 1) * rows)
                loss = self.loss_of(x[part], y[part])
                (loss / self.accum).backward()
                value += loss.item()
            value /= self.accum  # Equal chunks: the mean over all tokens.
        if self.clip > 0:
            self.torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        return value

    def validation_loss(self, eval_batch):
        torch = self.torch
        self.model.eval()
        total, count = 0.0, 0
        starts = self.data.val_starts()
        with torch.no_grad():
            for i in range(0, len(starts), eval_batch):
                x, y = self.batch_of(starts[i:i + eval_batch])
                logits = self.model(x)
                losses = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                    reduction="none")
                total += losses.double().sum().item()
                count += losses.numel()
        self.model.train()
        return total / count if count else float("nan"), len(starts)


# ---------------------------------------------------------------- layertest

_TEST_LLAMA = """
model {
  layers { token_embedding { vocab_size: %(vocab)d dim: 16 } }
  layers { llama_block { dim: 16 heads: 4 kv_heads: 2 hidden: 24
                         rope_theta: 500 eps: 1e-5 } }
  layers { llama_block { dim: 16 heads: 4 hidden: 20 } }
  layers { rms_norm { dim: 16 } }
  layers { linear { in_features: 16 out_features: %(vocab)d bias: false }
           tie_weight_to: 0 }
}
data { text { files: "%(corpus)s" context: 12 tokenizer: "chars" } }
optimizer {
  %(opt)s
  param_groups { kinds: ["norm"] lr_scale: 0.5 }
  param_groups { kinds: ["norm", "embedding", "bias"] weight_decay: 0 }
  clip_grad_norm: %(clip)s
}
batch_size: 6
grad_accumulation: %(accum)d
seed: 3
"""

_TEST_GPT = """
model {
  layers { token_embedding { vocab_size: %(vocab)d dim: 16 } }
  layers { position_embedding { context: 12 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { causal_self_attention { dim: 16 heads: 2 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 16 } }
  layers { gelu {} }
  layers { linear { in_features: 16 out_features: %(vocab)d } }
}
data { text { files: "%(corpus)s" context: 12 tokenizer: "chars" } }
optimizer {
  %(opt)s
  param_groups { kinds: ["bias", "norm", "embedding"] weight_decay: 0 }
}
batch_size: 4
seed: 3
"""


def layertest(args, torch):
    """The LLaMA pieces against plain float64 re-implementations, and the
    optimizer features against their definitions."""
    import tempfile
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="torch_gpt_layertest.")
    corpus = os.path.join(tmp, "corpus.txt")
    g = torch.Generator().manual_seed(5)
    alphabet = "abcdefghij .,\n"
    with open(corpus, "w") as f:
        f.write("".join(alphabet[i] for i in
                        torch.randint(len(alphabet), (3000,), generator=g)))
    vocab = len(alphabet)
    checks = []

    def close(what, a, b, tol):
        a, b = a.double(), b.double()
        err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
        checks.append(what)
        if not err <= tol:
            raise AssertionError("%s: relative error %.3e > %.0e" %
                                 (what, err, tol))
        print("  %-58s %.1e" % (what, err))

    def trainer(template, **kw):
        d = {"vocab": vocab, "corpus": corpus, "clip": 0, "accum": 1,
             "opt": "adamw { lr: 0.01 weight_decay: 0.1 }"}
        d.update(kw)
        path = os.path.join(tmp, "spec%d.textproto" % len(os.listdir(tmp)))
        with open(path, "w") as f:
            f.write(template % d)
        ns = argparse.Namespace(spec=path, threads=args.threads,
                                torch_seed=11, attention=args.attention,
                                init=None, device="cpu")
        return Trainer(ns, torch)

    tr = trainer(_TEST_LLAMA)
    model = tr.model
    blk = model.layers[1]
    attn = blk.self_attn
    names = {n: tuple(p.shape) for n, p in model.state_dict().items()}
    want = {
        "layers.0.weight": (vocab, 16), "layers.4.weight": (vocab, 16),
        "layers.1.input_layernorm.weight": (16,),
        "layers.1.self_attn.q_proj.weight": (16, 16),
        "layers.1.self_attn.k_proj.weight": (8, 16),
        "layers.1.self_attn.v_proj.weight": (8, 16),
        "layers.1.self_attn.o_proj.weight": (16, 16),
        "layers.1.post_attention_layernorm.weight": (16,),
        "layers.1.mlp.gate_proj.weight": (24, 16),
        "layers.1.mlp.up_proj.weight": (24, 16),
        "layers.1.mlp.down_proj.weight": (16, 24),
        "layers.2.self_attn.k_proj.weight": (16, 16),
        "layers.2.mlp.down_proj.weight": (16, 20),
        "layers.3.weight": (16,)}
    for n, shape in want.items():
        assert names.get(n) == shape, (n, names.get(n), shape)
    assert len(names) == 2 + 9 * 2 + 1, sorted(names)
    checks.append("parameter names and shapes")
    print("  parameter names and shapes: ok")
    assert attn.heads == 4 and attn.kv_heads == 2 and attn.theta == 500.0
    assert blk.input_layernorm.eps == f32(1e-5)
    assert model.layers[2].self_attn.kv_heads == 4
    assert model.layers[2].self_attn.theta == 10000.0
    assert model.layers[3].eps == f32(1e-6)
    with torch.no_grad():  # Norm weights away from 1 and sharp
        for p in model.parameters():  # attention, for differences to show.
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.4)

    # RMSNorm, row by row.
    x = torch.randn(3, 5, 16)
    w = blk.input_layernorm.weight.detach().double()
    ref = torch.empty(3, 5, 16, dtype=torch.float64)
    for b in range(3):
        for t in range(5):
            r = x[b, t].double()
            ms = sum(float(v) ** 2 for v in r) / 16
            ref[b, t] = r / math.sqrt(ms + f32(1e-5)) * w
    close("rms_norm vs a row-by-row loop", blk.input_layernorm(x).detach(),
          ref, 1e-6)

    # RoPE: dimension i pairs with i + hd/2, angle t * theta^(-2i/hd).
    T, hd, theta = 12, 4, 500.0
    cos, sin = rope_tables(torch, T, hd, theta)
    v = torch.randn(2, 3, T, hd)
    out = v * cos + rotate_half(torch, v) * sin
    ref = torch.empty(2, 3, T, hd, dtype=torch.float64)
    for t in range(T):
        for i in range(hd // 2):
            a = t * theta ** (-2.0 * i / hd)
            x0, x1 = v[..., t, i].double(), v[..., t, i + hd // 2].double()
            ref[..., t, i] = x0 * math.cos(a) - x1 * math.sin(a)
            ref[..., t, i + hd // 2] = x1 * math.cos(a) + x0 * math.sin(a)
    close("rope vs the pair-by-pair rotation", out, ref, 1e-5)
    # Scores depend on positions only through their difference.
    qv, kv = torch.randn(hd).double(), torch.randn(hd).double()
    rot = lambda u, t: (u * cos[t].double() +
                        rotate_half(torch, u) * sin[t].double())
    s1 = torch.stack([rot(qv, t + 3) @ rot(kv, t) for t in range(T - 3)])
    close("rope: q(t+3).k(t) the same for every t", s1,
          s1[:1].expand_as(s1), 1e-5)

    # The whole block, float64, head by head and position by position.
    def ref_block(x, blk):
        P = {n: p.detach().double() for n, p in blk.named_parameters()}
        a = blk.self_attn
        H, KV, hd = a.heads, a.kv_heads, a.hd

        def rms(u, w):
            return u / torch.sqrt((u * u).mean(-1, keepdim=True) +
                                  blk.input_layernorm.eps) * w

        x = x.double()
        B, T, C = x.shape
        h = rms(x, P["input_layernorm.weight"])
        q = h @ P["self_attn.q_proj.weight"].t()
        k = h @ P["self_attn.k_proj.weight"].t()
        vv = h @ P["self_attn.v_proj.weight"].t()
        y = torch.zeros(B, T, C, dtype=torch.float64)
        for b in range(B):
            for head in range(H):
                g = head // (H // KV)
                qs = q[b, :, head * hd:(head + 1) * hd]
                ks = k[b, :, g * hd:(g + 1) * hd]
                vs = vv[b, :, g * hd:(g + 1) * hd]

                def rope(u, t):
                    out = u.clone()
                    for i in range(hd // 2):
                        ang = t * a.theta ** (-2.0 * i / hd)
                        c, s_ = math.cos(ang), math.sin(ang)
                        out[i] = u[i] * c - u[i + hd // 2] * s_
                        out[i + hd // 2] = u[i + hd // 2] * c + u[i] * s_
                    return out

                qr = torch.stack([rope(qs[t], t) for t in range(T)])
                kr = torch.stack([rope(ks[t], t) for t in range(T)])
                for t in range(T):
                    sc = torch.stack([qr[t] @ kr[j] for j in range(t + 1)])
                    p_ = torch.softmax(sc / math.sqrt(hd), 0)
                    y[b, t, head * hd:(head + 1) * hd] = p_ @ vs[:t + 1]
        x = x + y @ P["self_attn.o_proj.weight"].t()
        h = rms(x, P["post_attention_layernorm.weight"])
        gt = h @ P["mlp.gate_proj.weight"].t()
        up = h @ P["mlp.up_proj.weight"].t()
        m = (gt * torch.sigmoid(gt) * up) @ P["mlp.down_proj.weight"].t()
        return x + m

    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        close("llama_block (GQA 4/2) vs per-head loops", blk(x),
              ref_block(x, blk), 2e-6)
        close("llama_block (MHA 4/4) vs per-head loops",
              model.layers[2](x), ref_block(x, model.layers[2]), 2e-6)
        # GQA as Hugging Face's repeat_kv (expand + reshape).
        k = torch.randn(2, 2, 7, 4)
        hf = k[:, :, None].expand(2, 2, 2, 7, 4).reshape(2, 4, 7, 4)
        close("repeat_interleave == HF repeat_kv", k.repeat_interleave(2, 1),
              hf, 0)

    # Kinds, with the tied head of the embedding's kind (one parameter).
    kinds = model.param_kinds()
    sd = model.state_dict(keep_vars=True)
    assert sd["layers.4.weight"] is sd["layers.0.weight"]
    got = {n: kinds[id(p)] for n, p in sd.items()}
    for n, k in got.items():
        want = ("embedding" if n in ("layers.0.weight", "layers.4.weight")
                else "norm" if "layernorm" in n or n == "layers.3.weight"
                else "weight")
        assert k == want, (n, k, want)
    gpt = trainer(_TEST_GPT)
    gk = {n: gpt.model.param_kinds()[id(p)]
          for n, p in gpt.model.state_dict(keep_vars=True).items()}
    assert gk["layers.0.weight"] == gk["layers.1.weight"] == "embedding"
    for n in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"):
        assert gk["layers.2." + n] == "norm", n
    assert gk["layers.4.weight"] == gk["layers.4.bias"] == "norm"
    for n in ("layers.2.attn.c_attn.bias", "layers.2.mlp.c_proj.bias",
              "layers.3.c_attn.bias", "layers.5.bias", "layers.7.bias"):
        assert gk[n] == "bias", n
    for n in ("layers.2.attn.c_attn.weight", "layers.2.mlp.c_fc.weight",
              "layers.3.c_proj.weight", "layers.5.weight", "layers.7.weight"):
        assert gk[n] == "weight", n
    checks.append("parameter kinds")
    print("  parameter kinds (llama, tied head; gpt): ok")

    # Groups: norm in the first group (lr 0.5x, the optimizer's decay),
    # embedding in the second (decay 0), weights in the rest.
    by = {tuple(g["kinds"]): g for g in tr.opt.param_groups}
    assert set(by) == {("norm",), ("norm", "embedding", "bias"),
                       ("(rest)",)}, set(by)
    assert by[("norm",)]["lr_scale"] == 0.5
    assert by[("norm",)]["weight_decay"] == f32(0.1)
    assert by[("norm", "embedding", "bias")]["weight_decay"] == 0
    assert len(by[("norm", "embedding", "bias")]["params"]) == 1
    assert len(by[("norm",)]["params"]) == 5
    assert sum(len(g["params"]) for g in tr.opt.param_groups) == \
        len(tr.params) == 20
    checks.append("param groups")

    # One AdamW step against its definition (first step: m^ = g, v^ = g^2).
    before = {id(p): p.detach().clone() for p in tr.params}
    group_of = {id(p): g for g in tr.opt.param_groups for p in g["params"]}
    tr.step(0, 10)
    worst = 0.0
    for p in tr.params:
        gr, g = p.grad.double(), group_of[id(p)]
        lr = f32(f32(0.01) * g["lr_scale"])
        assert g["lr"] == lr
        want = before[id(p)].double() * (1 - lr * g["weight_decay"]) - \
            lr * gr / (gr.abs() + f32(1e-8))
        worst = max(worst, (p.detach().double() - want).abs().max().item())
    assert worst < 1e-6, worst  # float32 rounding; the update is ~1e-2
    checks.append("adamw step with param groups")
    print("  adamw first step with param groups (|diff| %.1e): ok" % worst)

    # Adam (L2 decay in the gradient) under the same groups.
    ta = trainer(_TEST_LLAMA, opt="adam { lr: 0.01 weight_decay: 0.1 }")
    assert isinstance(ta.opt, torch.optim.Adam)
    assert not isinstance(ta.opt, torch.optim.AdamW)
    assert isinstance(tr.opt, torch.optim.AdamW)

    # Gradient accumulation: the same gradients as the whole minibatch.
    one, two = trainer(_TEST_LLAMA), trainer(_TEST_LLAMA, accum=2)
    three = trainer(_TEST_LLAMA, accum=3)
    for a, b in zip(one.params, two.params):
        assert torch.equal(a, b)  # The same init (torch seed).
    l1, l2, l3 = one.gradients(4), two.gradients(4), three.gradients(4)
    close("grad_accumulation 2: the loss", torch.tensor(l2),
          torch.tensor(l1), 1e-6)
    close("grad_accumulation 3: the loss", torch.tensor(l3),
          torch.tensor(l1), 1e-6)
    flat = lambda t: torch.cat([p.grad.reshape(-1) for p in t.params])
    close("grad_accumulation 2: the gradients", flat(two), flat(one), 1e-5)
    close("grad_accumulation 3: the gradients", flat(three), flat(one), 1e-5)
    # ... and the chunks are the minibatch's rows in order.
    x, y = one.batch_of(one.data.batch_starts(4, 6))
    with torch.no_grad():
        parts = [one.loss_of(x[i:i + 2], y[i:i + 2]).item()
                 for i in range(0, 6, 2)]
    close("grad_accumulation: the chunks' mean", torch.tensor(l3),
          torch.tensor(sum(parts) / 3), 1e-7)

    # Clipping: the norm (each parameter once, the tied one too) scaled
    # to C when over it, untouched under it.
    norm = flat(one).double().norm().item()
    for c, scaled in ((norm / 4, True), (norm * 2, False)):
        t = trainer(_TEST_LLAMA, clip=repr(c))
        t.gradients(4)
        want = flat(one).double() * (min(1.0, f32(c) / (norm + 1e-6)))
        close("clip_grad_norm %s" % ("(clipping)" if scaled else "(idle)"),
              flat(t), want, 1e-6)
    gpt.step(0, 10)
    print("layertest: %d checks ok" % len(checks))
    return 0


def read_aq_losses(path):
    with open(path) as f:
        text = f.read()
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            obj = json.loads(line)
            if "loss" in obj:
                return [float(v) for v in obj["loss"]]
    obj = json.loads(text)
    return [float(v) for v in obj["loss"]]


def equivalence(args, torch):
    if not args.init:
        sys.exit("equivalence needs --init (aq train-local S --max_steps 0 "
                 "--save_weights INIT)")
    aq = read_aq_losses(args.aq_losses)
    tr = Trainer(args, torch)
    if tr.model.dropout_max > 0:
        sys.exit("equivalence needs dropout 0 in %s (masks differ)" % args.spec)
    steps = args.steps
    if len(aq) < steps:
        print("note: %s holds %d losses; comparing %d steps" % (
            args.aq_losses, len(aq), len(aq)))
        steps = len(aq)
    total = args.total_steps or steps
    print("%s: %d parameters, vocabulary %d of %d, %d training windows, "
          "threads %d, schedule over %d steps" % (
              args.spec, sum(p.numel() for p in tr.model.parameters()),
              tr.data.vocab, tr.model.layers[0].weight.shape[0]
              if hasattr(tr.model.layers[0], "weight") else -1,
              tr.data.windows, torch.get_num_threads(), total))
    print("optimizer %s, clip_grad_norm %g, grad_accumulation %d, %s" % (
        type(tr.opt).__name__, tr.clip, tr.accum, tr.describe_groups()))
    print("%5s %12s %12s %10s %10s" % ("step", "aqueduct", "pytorch", "rel diff",
                                       "lr"))
    worst, worst_step = 0.0, -1
    for m in range(steps):
        lr = f32(tr.base_lr * lr_factor(tr.schedule, m, total))
        t = tr.step(m, total)
        rel = abs(aq[m] - t) / max(abs(t), 1e-30)
        if rel > worst:
            worst, worst_step = rel, m + 1
        print("%5d %12.7f %12.7f %10.2e %10.3e" % (m + 1, aq[m], t, rel, lr))
    ok = worst <= args.tolerance
    print("max relative difference %.3e (step %d) over %d steps: %s "
          "(tolerance %.1e)" % (worst, worst_step, steps,
                                "OK" if ok else "MISMATCH", args.tolerance))
    print(json.dumps({"max_rel_diff": worst, "at_step": worst_step,
                      "steps": steps, "tolerance": args.tolerance, "ok": ok}))
    return 0 if ok else 1


def accuracy(args, torch):
    tr = Trainer(args, torch)
    steps = args.steps if args.steps is not None else int(
        get(tr.spec, "max_steps", 0))
    total = args.total_steps or steps
    start = time.perf_counter()
    last = None
    for m in range(steps):
        last = tr.step(m, total)
        if args.log_every and (m + 1) % args.log_every == 0:
            print("step %d loss %.4f" % (m + 1, last), file=sys.stderr)
    seconds = time.perf_counter() - start
    val, windows = tr.validation_loss(args.eval_batch or tr.batch)
    print(json.dumps({
        "impl": "pytorch-" + torch.__version__, "spec": args.spec,
        "steps": steps, "init": args.init or "torch", "final_loss": last,
        "val_loss": val, "val_perplexity": math.exp(val),
        "val_windows": windows, "train_seconds": round(seconds, 2),
        "threads": torch.get_num_threads()}))
    return 0


def speed(args, torch):
    tr = Trainer(args, torch)
    total = args.total_steps or (args.warmup + args.steps)
    for m in range(args.warmup + args.steps):
        if m == args.warmup:
            start = time.perf_counter()
        last = tr.step(m, total)
    seconds = time.perf_counter() - start
    sps = args.steps * tr.batch / seconds
    print(json.dumps({
        "impl": "pytorch-" + torch.__version__, "spec": args.spec,
        "device": str(tr.device),
        "batch": tr.batch, "context": tr.ctx,
        "threads": torch.get_num_threads(), "steps": args.steps,
        "warmup": args.warmup, "attention": "sdpa" if (
            args.attention != "manual" and hasattr(
                torch.nn.functional, "scaled_dot_product_attention"))
        else "manual",
        "samples_per_second": round(sps, 2),
        "tokens_per_second": round(sps * tr.ctx, 1),
        "ms_per_step": round(1000 * seconds / args.steps, 3),
        "final_loss": round(last, 4)}))
    return 0


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["equivalence", "accuracy", "speed",
                                    "selftest", "layertest"])
    p.add_argument("--spec")
    p.add_argument("--init", help="initial weights (safetensors)")
    p.add_argument("--aq_losses", help="aq train-local --output json output")
    p.add_argument("--steps", type=int, default=None,
                   help="steps to train (timed steps for speed); default 50, "
                   "for accuracy the spec's max_steps")
    p.add_argument("--total_steps", type=int, default=0,
                   help="steps the LR schedule spans (default: the steps "
                   "run, as aq train-local --max_steps)")
    p.add_argument("--warmup", type=int, default=5,
                   help="speed: untimed steps first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu",
                   help="torch device, e.g. cuda:0 (speed is then timed "
                   "with the loss read back each step, as on the CPU)")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.add_argument("--attention", choices=["auto", "manual"], default="auto",
                   help="auto: F.scaled_dot_product_attention when torch has "
                   "it; manual: nanoGPT's explicit softmax(QK^T)V")
    p.add_argument("--eval_batch", type=int, default=0)
    p.add_argument("--log_every", type=int, default=0)
    p.add_argument("--torch_seed", type=int, default=1)
    a = p.parse_args()
    if a.mode == "selftest":
        selftest()
        return 0
    if not a.spec and a.mode != "layertest":
        p.error("--spec is required")
    if a.steps is None and a.mode != "accuracy":
        a.steps = 50
    import torch  # noqa: E402  (selftest runs without it)
    return {"equivalence": equivalence, "accuracy": accuracy,
            "speed": speed, "layertest": layertest}[a.mode](a, torch)


if __name__ == "__main__":
    sys.exit(main())
