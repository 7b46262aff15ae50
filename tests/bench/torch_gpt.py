#!/usr/bin/python3
"""PyTorch reference for Aqueduct's GPT layers (nanoGPT semantics).

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
      biases 0, LayerNorm 1 and 0), not in value.
  speed --spec S --steps N [--warmup 5] [--threads T]
      Tokens/s of the training step (batch gather, forward, backward, Adam
      step, loss read back), over --steps steps after --warmup steps. One
      JSON line. (aq train-local --max_steps N excludes its first 5 steps:
      pass --warmup 5 --steps N-5 to time the same steps.)
  selftest
      Checks SplitMix64 and the window function against the values
      hard-coded in worker/data/text_test.cc; no torch needed.

The spec: text format (proto/job.proto; a small parser below reads it) or
protobuf JSON. Read: model.layers (token_embedding, position_embedding,
transformer_block, causal_self_attention, layer_norm, linear, gelu, relu,
dropout; tie_weight_to), data.text (files, context, tokenizer,
val_fraction, val_windows), optimizer (adam or sgd, schedule), batch_size,
max_steps, seed. Weights: safetensors parsed here (F32/F16/BF16), names
"layers.<i>.<param>" (docs/weights.md): the model below is a ModuleList
named layers whose state_dict names are Aqueduct's.

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
  * Adam: torch.optim.Adam (L2 weight decay in the gradient); lr per step
    = float32(lr) * LearningRateFactor(schedule, step, total steps);
  * tied head: lm_head.weight IS the embedding's weight (one parameter;
    Aqueduct sums the two copies' gradients, which is the same).
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
        def __init__(self, dim, hidden, dropout, bias):
            super().__init__()
            self.c_fc = linear(dim, hidden, bias)
            self.c_proj = linear(hidden, dim, bias)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, dim, heads, dropout, hidden, bias, eps):
            super().__init__()
            self.ln_1 = nn.LayerNorm(dim, eps=eps)
            self.attn = CausalSelfAttention(dim, heads, dropout, bias)
            self.ln_2 = nn.LayerNorm(dim, eps=eps)
            self.mlp = MLP(dim, hidden, dropout, bias)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

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
            m = Block(dim, int(get(s, "heads")), p,
                      int(get(s, "mlp_hidden", 4 * dim)),
                      bool(get(s, "bias", True)), f32(get(s, "eps", 1e-5)))
        elif "causal_self_attention" in l:
            s = get(l, "causal_self_attention")
            p = f32(get(s, "dropout", 0.0))
            dropout_max = max(dropout_max, p)
            m = CausalSelfAttention(int(get(s, "dim")), int(get(s, "heads")),
                                    p, bool(get(s, "bias", True)))
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
            # N(0, 0.02) (c_proj too), biases 0, LayerNorm 1 and 0.
            for name, p in self.named_parameters():
                with torch.no_grad():
                    if isinstance(self._owner(name), nn.LayerNorm):
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

    model = GPT()
    model.ties = ties
    model.dropout_max = dropout_max
    return model


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
        params = list(self.model.parameters())  # Tied: counted once.
        if "adam" in opt:
            a = get(opt, "adam")
            self.base_lr = f32(get(a, "lr"))
            self.opt = torch.optim.Adam(
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
        self.offsets = torch.arange(self.ctx + 1, device=self.device)

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
        x, y = self.batch_of(self.data.batch_starts(m, self.batch))
        lr = f32(self.base_lr * lr_factor(self.schedule, m, total_steps))
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_of(x, y)
        loss.backward()
        self.opt.step()
        return loss.item()

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
                                    "selftest"])
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
    if not a.spec:
        p.error("--spec is required")
    if a.steps is None and a.mode != "accuracy":
        a.steps = 50
    import torch  # noqa: E402  (selftest runs without it)
    return {"equivalence": equivalence, "accuracy": accuracy,
            "speed": speed}[a.mode](a, torch)


if __name__ == "__main__":
    sys.exit(main())
