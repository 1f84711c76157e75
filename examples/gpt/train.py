"""Train a small GPT for a fixed wall-clock budget and report val_bpb. Edit freely.

The knobs below are plain assignments so that assay (apply = "assign") and people can
change them. prepare.py holds the data, the evaluation and the accounting; leave it alone.

Run: ``python prepare.py && python train.py`` (``GPT_PRESET=tiny`` for a CPU smoke run).
"""

from __future__ import annotations

import math
import os
import time

T_START = time.time()

import prepare  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# --- knobs ------------------------------------------------------------------------------
PRESET = "default"  # "default" or "tiny" (the environment's GPT_PRESET wins)
TIME_BUDGET = 300.0  # seconds of training, compile steps excluded
TOTAL_BATCH_SIZE = 262144  # tokens per optimizer step (2**18)
DEVICE_BATCH_SIZE = 128  # sequences per forward/backward (gradient accumulation fills up;
# 128 x 2048 is one micro-batch per step and about 58 GB on an H200: 64 halves that)
DEPTH = 8  # transformer blocks
MODEL_DIM = 640  # width, rounded up to a multiple of HEAD_DIM (640: five heads)
HEAD_DIM = 128
VALUE_EMBEDS = True  # per-token value embeddings mixed into every other layer's values
EMBED_DTYPE = "bfloat16"  # token and value tables on a GPU, "bfloat16" or "float32"; bf16
# tables make the residual stream bf16 too (a CPU run, without autocast, stays in float32)
LR_MULT = 1.0  # multiplies every learning rate below
MATRIX_LR = 0.05  # Muon, for the blocks' weight matrices
EMBED_LR = 0.6  # Adam, token and value embeddings (scaled by (768 / width) ** 0.5)
HEAD_LR = 0.004  # Adam, output layer (same width scaling)
SCALAR_LR = 0.5  # Adam, the per-layer residual mixing scalars
WEIGHT_DECAY = 0.2  # Muon's sign-masked weight decay, falling linearly to zero
WARMUP_FRAC = 0.0  # share of the budget spent warming the learning rate up
WARMDOWN_FRAC = 0.5  # share of the budget at the end spent decaying it to zero
LOGIT_CAP = 15.0
COMPILE = "full"  # "none", "optimizer" (the fused optimizer steps only) or "full"
MUON_BATCHED = True  # one Muon call (one graph) for all shapes, not one call per shape
ATTENTION = "auto"  # "auto", "cudnn", "flash", "efficient" or "math"
SEED = 42
# ----------------------------------------------------------------------------------------

ACTIVE_PRESET = os.environ.get("GPT_PRESET", PRESET)
if ACTIVE_PRESET == "tiny":  # a CPU smoke run of seconds
    TIME_BUDGET = float(os.environ.get("GPT_TIME_BUDGET", 4.0))
    TOTAL_BATCH_SIZE, DEVICE_BATCH_SIZE = 2048, 16
    DEPTH, MODEL_DIM, HEAD_DIM = 2, 64, 32
    COMPILE = os.environ.get("GPT_COMPILE", "none")


def pick_attention(device: torch.device, wanted: str) -> str:
    """The SDPA backend for this GPU: cuDNN on Hopper and datacenter Blackwell (on an
    H200 it ran about 1.7x faster than flash for a B16 H12 T2048 D128 bf16 step), flash on
    other CUDA GPUs from Ampere on, memory-efficient before that; the CPU's own kernel."""
    if device.type != "cuda":
        return "cpu"
    if wanted != "auto":
        return wanted
    major, _ = torch.cuda.get_device_capability(device)
    if major in (9, 10):
        return "cudnn"
    return "flash" if major >= 8 else "efficient"


def set_attention(backend: str, device: torch.device) -> str:
    """Enable only ``backend`` and check it runs at the model's head size; fall back to
    PyTorch's own choice, and say so, when it does not."""
    if backend == "cpu":
        return backend
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kinds = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    q = torch.randn(1, 2, 256, HEAD_DIM, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    try:
        with sdpa_kernel([kinds[backend]]):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    except RuntimeError as exc:
        print(f"warning: attention backend {backend} does not run here ({exc}); "
              "using PyTorch's default choice")
        return "default"
    torch.backends.cuda.enable_cudnn_sdp(backend == "cudnn")
    torch.backends.cuda.enable_flash_sdp(backend == "flash")
    torch.backends.cuda.enable_mem_efficient_sdp(backend == "efficient")
    torch.backends.cuda.enable_math_sdp(backend == "math")
    return backend


# --- model ------------------------------------------------------------------------------


def rotary(seq_len: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len, device=device).float(), inv)
    return freqs.cos()[None, :, None, :], freqs.sin()[None, :, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).type_as(x)


def norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def has_value_embed(layer: int, depth: int) -> bool:
    """Every other layer, counted from the last one (which always has one)."""
    return VALUE_EMBEDS and (depth - 1 - layer) % 2 == 0


class Block(nn.Module):
    GATE_IN = 32  # channels of the input that set the value-embedding gate

    def __init__(self, dim: int, heads: int, head_dim: int, value_embed: bool) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(dim, 3 * heads * head_dim, bias=False)
        self.proj = nn.Linear(heads * head_dim, dim, bias=False)
        self.fc = nn.Linear(dim, 4 * dim, bias=False)
        self.out = nn.Linear(4 * dim, dim, bias=False)
        self.gate = nn.Linear(min(self.GATE_IN, dim), heads, bias=False) if value_embed else None

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = norm(x)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        if ve is not None and self.gate is not None:
            # a per-head gate in (0, 2), 1 at initialisation
            g = 2.0 * torch.sigmoid(self.gate(h[..., :self.gate.in_features]))
            v = v + (g.unsqueeze(-1) * ve.view(b, t, self.heads, self.head_dim)).to(v.dtype)
        q, k = norm(apply_rotary(q, cos, sin)), norm(apply_rotary(k, cos, sin))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return x + self.out(F.relu(self.fc(norm(x))).square())


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, head_dim: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        flags = [has_value_embed(i, depth) for i in range(depth)]
        self.blocks = nn.ModuleList(Block(dim, dim // head_dim, head_dim, f) for f in flags)
        # value embeddings, keyed by the layer that reads them
        self.values = nn.ModuleDict({str(i): nn.Embedding(vocab, dim)
                                     for i, f in enumerate(flags) if f})
        self.head = nn.Linear(dim, vocab, bias=False)
        # each block's input: keep * stream + skip * (normed embedding)
        self.keep = nn.Parameter(torch.ones(depth))
        self.skip = nn.Parameter(torch.zeros(depth))
        self.seq_len = seq_len
        cos, sin = rotary(seq_len, head_dim, self.embed.weight.device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self) -> None:
        nn.init.normal_(self.embed.weight, std=1.0)
        nn.init.normal_(self.head.weight, std=0.001)
        bound = math.sqrt(3.0 / self.embed.embedding_dim)
        for blk in self.blocks:
            assert isinstance(blk, Block)
            for lin in (blk.qkv, blk.fc):
                nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.zeros_(blk.proj.weight)
            nn.init.zeros_(blk.out.weight)
            if blk.gate is not None:
                nn.init.zeros_(blk.gate.weight)
        for emb in self.values.values():
            assert isinstance(emb, nn.Embedding)
            nn.init.uniform_(emb.weight, -bound, bound)
        self.keep.fill_(1.0)
        self.skip.fill_(0.1)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Logits (B, T, vocab), or the mean loss when ``targets`` are given (the loss
        inside the model lets a compiled model fuse it with the output layer)."""
        t = idx.size(1)
        cos, sin = self.cos[:, :t], self.sin[:, :t]
        # the cast keeps bf16 tables' stream in bf16 where autocast runs rms_norm in fp32
        x = x0 = norm(self.embed(idx)).to(self.embed.weight.dtype)
        for i, blk in enumerate(self.blocks):
            x = self.keep[i] * x + self.skip[i] * x0
            key = str(i)
            ve = self.values[key](idx) if key in self.values else None
            x = blk(x, ve, cos, sin)
        logits = self.head(norm(x)).float()
        logits = LOGIT_CAP * torch.tanh(logits / LOGIT_CAP)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def matmul_params(self) -> int:
        """Weights that multiply activations: the blocks and the output layer (not the
        embedding tables, which are looked up, nor the mixing scalars)."""
        return sum(p.numel() for n, p in self.named_parameters()
                   if n.startswith(("blocks.", "head.")))


# --- optimizers: steps take their hyperparameters as tensors, so schedules never recompile


def zeropower(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Newton-Schulz iteration towards the nearest semi-orthogonal matrix (batched)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        s = x @ x.mT
        x = a * x + (b * s + c * s @ s) @ x
    return x.mT if tall else x


def orthogonalise(gs: list[torch.Tensor]) -> list[torch.Tensor]:
    """``zeropower`` of each stack; stacks whose matrices have the same shape up to a
    transpose (an MLP's fc and out) share one batched Newton-Schulz call."""
    tall = [g.size(-2) > g.size(-1) for g in gs]
    wide = [g.mT if t else g for g, t in zip(gs, tall, strict=True)]
    done: dict[int, torch.Tensor] = {}
    for shape in dict.fromkeys(w.shape[-2:] for w in wide):
        idx = [i for i, w in enumerate(wide) if w.shape[-2:] == shape]
        x = zeropower(torch.cat([wide[i] for i in idx]) if len(idx) > 1 else wide[idx[0]])
        for i, part in zip(idx, torch.split(x, [wide[i].size(0) for i in idx]), strict=True):
            done[i] = part.mT if tall[i] else part
    return [done[i] for i in range(len(gs))]


# (params, grads, momentum buffer, second-moment buffer) of same-shape matrices
MuonGroup = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]


def muon_step(groups: list[MuonGroup], lr: torch.Tensor, momentum: torch.Tensor,
              decay: torch.Tensor, beta2: float = 0.95) -> None:
    """Per group: Nesterov momentum, orthogonalised; then each output row (or column, for
    wide matrices) is rescaled by a running RMS of its own updates, keeping the update's
    overall norm; decay applies only where update and weight agree in sign. One call takes
    one group or all of them (``MUON_BATCHED``); the math is the same."""
    gs = []
    for _, grads, buf, _ in groups:
        g = torch.stack(grads)
        buf.lerp_(g, 1 - momentum)
        gs.append(g.lerp(buf, momentum))
    for (params, _, _, second), orth in zip(groups, orthogonalise(gs), strict=True):
        _muon_update(params, orth.float(), second, lr, decay, beta2)


def _muon_update(params: list[torch.Tensor], update: torch.Tensor, second: torch.Tensor,
                 lr: torch.Tensor, decay: torch.Tensor, beta2: float) -> None:
    w = torch.stack(params)
    rows, cols = w.shape[-2:]
    axis = -1 if rows >= cols else -2
    ms = update.square().mean(dim=axis, keepdim=True)
    second.lerp_(ms, 1 - beta2)
    scaled = update * second.clamp_min(1e-10).rsqrt()
    ratio = update.norm(dim=(-2, -1), keepdim=True) / scaled.norm(
        dim=(-2, -1), keepdim=True).clamp_min(1e-10)
    update = scaled * ratio * max(1.0, rows / cols) ** 0.5
    agree = (update * w) >= 0
    new = w - lr * (update + decay * w * agree)
    torch._foreach_copy_(params, list(new.to(w.dtype).unbind(0)))


def adam_step(params: list[torch.Tensor], grads: list[torch.Tensor],
              m: list[torch.Tensor], v: list[torch.Tensor], step: torch.Tensor,
              lr: torch.Tensor, beta1: float = 0.8, beta2: float = 0.95,
              eps: float = 1e-10) -> None:
    for p, g, mi, vi in zip(params, grads, m, v, strict=True):
        g = g.float()  # the moments are float32 whatever the parameter's dtype
        mi.lerp_(g, 1 - beta1)
        vi.lerp_(g.square(), 1 - beta2)
        mhat = mi / (1 - beta1**step)
        vhat = vi / (1 - beta2**step)
        p.sub_(lr * mhat / (vhat.sqrt() + eps))


class Optimizer:
    """Muon for the blocks' matrices, Adam for embeddings, output layer and scalars."""

    def __init__(self, model: GPT, compiled: bool) -> None:
        dev = model.embed.weight.device
        matrices = [p for p in model.blocks.parameters() if p.ndim == 2]
        self.groups: dict[tuple[int, ...], list[nn.Parameter]] = {}
        for p in matrices:
            self.groups.setdefault(tuple(p.shape), []).append(p)
        self.bufs = {s: torch.zeros(len(ps), *s, device=dev) for s, ps in self.groups.items()}
        self.second = {s: torch.zeros(len(ps), *((s[0], 1) if s[0] >= s[1] else (1, s[1])),
                                      device=dev) for s, ps in self.groups.items()}
        width = (768 / model.embed.embedding_dim) ** 0.5
        self.adam: list[tuple[list[nn.Parameter], str, float, float]] = [
            ([model.embed.weight, *model.values.parameters()], "embed", EMBED_LR * width, 0.8),
            ([model.head.weight], "head", HEAD_LR * width, 0.8),
            ([model.keep], "keep", SCALAR_LR * 0.01, 0.8),
            ([model.skip], "skip", SCALAR_LR, 0.96),
        ]
        self.m = [[torch.zeros_like(p, dtype=torch.float32) for p in ps] for ps, *_ in self.adam]
        self.v = [[torch.zeros_like(p, dtype=torch.float32) for p in ps] for ps, *_ in self.adam]
        self.step_t = torch.zeros((), device=dev)
        names = ["matrix", "momentum", "decay"] + [name for _, name, *_ in self.adam]
        self.t = {name: torch.zeros((), device=dev) for name in names}
        self.muon = torch.compile(muon_step, dynamic=False) if compiled else muon_step
        self.adam_fn = torch.compile(adam_step, dynamic=False) if compiled else adam_step

    def step(self, scale: float, step: int, progress: float) -> None:
        self.step_t.add_(1)
        self.t["matrix"].fill_(MATRIX_LR * LR_MULT * scale)
        self.t["momentum"].fill_(0.85 + 0.10 * min(step / 300, 1.0))
        self.t["decay"].fill_(WEIGHT_DECAY * (1.0 - progress))
        groups: list[MuonGroup] = [
            ([p.data for p in ps], [p.grad for p in ps],  # type: ignore[misc]
             self.bufs[shape], self.second[shape]) for shape, ps in self.groups.items()]
        for batch in [groups] if MUON_BATCHED else [[g] for g in groups]:
            self.muon(batch, self.t["matrix"], self.t["momentum"], self.t["decay"])
        for (ps, name, lr, beta1), m, v in zip(self.adam, self.m, self.v, strict=True):
            self.t[name].fill_(lr * LR_MULT * scale)
            self.adam_fn([p.data for p in ps], [p.grad for p in ps],  # type: ignore[misc]
                         m, v, self.step_t, self.t[name], beta1)

    def zero_grad(self) -> None:
        for ps in self.groups.values():
            for p in ps:
                p.grad = None
        for ps, *_ in self.adam:
            for p in ps:
                p.grad = None


def lr_scale(progress: float) -> float:
    if progress < WARMUP_FRAC:
        return (progress + 1e-3) / WARMUP_FRAC
    if progress > 1.0 - WARMDOWN_FRAC:
        return max(0.0, (1.0 - progress) / WARMDOWN_FRAC)
    return 1.0


def graphs_compiled() -> int:
    if COMPILE == "none":
        return 0
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return 0


def main() -> None:
    torch.manual_seed(SEED)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    p = prepare.preset(ACTIVE_PRESET)
    data = prepare.Data(device, p)
    seq_len = data.seq_len
    precision = "bf16" if cuda else "fp32"
    acc = prepare.accelerator(device, precision)
    attention = set_attention(pick_attention(device, ATTENTION), device)
    if COMPILE not in ("none", "optimizer", "full"):
        raise SystemExit(f"COMPILE must be none, optimizer or full, not {COMPILE!r}")
    if EMBED_DTYPE not in ("bfloat16", "float32"):
        raise SystemExit(f"EMBED_DTYPE must be bfloat16 or float32, not {EMBED_DTYPE!r}")

    dim = math.ceil(MODEL_DIM / HEAD_DIM) * HEAD_DIM
    with torch.device(device):
        model = GPT(data.vocab_size, dim, DEPTH, HEAD_DIM, seq_len)
    model.init_weights()
    if cuda:  # autocast runs the blocks in bf16; the tables follow EMBED_DTYPE
        model.embed.to(getattr(torch, EMBED_DTYPE))
        model.values.to(getattr(torch, EMBED_DTYPE))
    opt = Optimizer(model, compiled=COMPILE in ("optimizer", "full"))
    fwd = torch.compile(model, dynamic=False) if COMPILE == "full" else model
    n_params = sum(q.numel() for q in model.parameters())
    fpt = prepare.flops_per_token(model.matmul_params(), DEPTH, seq_len, dim)
    # the same with attention counted as if unmasked (12·L·T·d), the convention of the PaLM
    # paper and of nanochat/autoresearch, printed only to compare with their figures
    fpt_palm = fpt + 6.0 * DEPTH * seq_len * dim

    per_micro = DEVICE_BATCH_SIZE * seq_len
    if TOTAL_BATCH_SIZE % per_micro:
        raise SystemExit(f"TOTAL_BATCH_SIZE {TOTAL_BATCH_SIZE} is not a multiple of "
                         f"DEVICE_BATCH_SIZE x seq_len = {per_micro}")
    accum = TOTAL_BATCH_SIZE // per_micro
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda)
    print(f"device: {acc.name} ({acc.chip or 'not in the hardware table'}); peak "
          f"{precision}: {acc.peak / 1e12 if acc.peak else 'unknown'} TFLOP/s")
    print(f"attention: {attention}")
    print(f"compile: {COMPILE}")
    print(f"model: depth {DEPTH}, width {dim}, {n_params / 1e6:.1f}M params, "
          f"{fpt / 1e9:.3f} GFLOP/token; batch {TOTAL_BATCH_SIZE} tokens = {accum} x "
          f"{DEVICE_BATCH_SIZE} x {seq_len}")
    print(f"corpus: {data.meta['corpus_sha256'][:16]}, {data.train_tokens / 1e6:.1f}M train "
          f"tokens, {data.eval_docs} eval docs / {data.eval_bytes} bytes")

    guard = prepare.FailFast(data.vocab_size)
    warm_steps = 2 if COMPILE != "none" else 1  # steps that compile are not timed
    # The GPU is synchronised once every `window` steps, not every step: the losses of a
    # window are read together, and its wall time is shared among its steps.
    window = 10 if cuda else 1
    step = 0
    trained = 0.0  # seconds counted against the budget
    timed_tokens = 0
    step_seconds = 0.0  # mean over the last window, to place the schedule between reads
    pending: list[torch.Tensor] = []
    warned_slow = False
    graphs_after_warmup = 0
    t_loop = t_mark = time.time()
    while True:
        progress = min((trained + len(pending) * step_seconds) / TIME_BUDGET, 1.0)
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            x, y = data.next_batch(DEVICE_BATCH_SIZE, seq_len)
            with autocast:
                loss = fwd(x, y)
            (loss / accum).backward()
            loss_sum += loss.detach()
        opt.step(lr_scale(progress), step, progress)
        opt.zero_grad()
        pending.append(loss_sum / accum)
        step += 1
        if step <= warm_steps:
            guard.check(step - 1, float(pending.pop().item()))  # synchronizes
            if step == warm_steps:
                graphs_after_warmup = graphs_compiled()
                print(f"warm-up: {time.time() - T_START:.1f}s from start to first timed step")
                t_mark = time.time()
            continue
        due = trained + (len(pending) + 1) * step_seconds >= TIME_BUDGET
        if len(pending) < window and not due:
            continue
        values = torch.stack(pending).tolist()  # synchronizes
        now = time.time()
        step_seconds = (now - t_mark) / len(values)
        trained += now - t_mark
        t_mark = now
        for i, value in enumerate(values):
            guard.check(step - len(values) + i, value)
        timed_tokens += len(values) * TOTAL_BATCH_SIZE
        pending.clear()
        loss_value = values[-1]
        tps = timed_tokens / trained
        print(f"step {step:5d} | loss {loss_value:.4f} | {tps:.0f} tok/s | "
              f"mfu {prepare.mfu_text(fpt * tps, acc)} | {trained:.0f}/{TIME_BUDGET:.0f}s "
              f"| epoch {data.epochs:.2f}", flush=True)
        if not warned_slow and step >= warm_steps + 10 and acc.peak:
            mfu = fpt * tps / acc.peak
            if mfu < 0.2:
                warned_slow = True
                print(f"warning: throughput is {100 * mfu:.1f}% of this GPU's peak; expect "
                      "over 40% for this model size (check ATTENTION, COMPILE, batch size)")
        if trained >= TIME_BUDGET:
            break
    recompiles = graphs_compiled() - graphs_after_warmup
    if recompiles > 0:
        print(f"warning: {recompiles} graph(s) compiled after warm-up; each one stalls the "
              "run and a changing shape or Python value usually causes it")
    if guard.stalled():
        print("warning: the loss never moved 5% below ln(vocab): the model is not learning")
    train_end = time.time()

    model.eval()
    with autocast:
        ev = prepare.evaluate_bpb(fwd, data, DEVICE_BATCH_SIZE)
    tps = timed_tokens / trained if trained else 0.0
    peak_mb = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    total = time.time() - T_START
    prepare.print_summary({
        "val_bpb": ev["val_bpb"],
        "training_seconds": trained,
        "total_seconds": total,
        "startup_seconds": total - trained,
        "eval_seconds": time.time() - train_end,
        "peak_vram_mb": peak_mb,
        "mfu_percent": prepare.mfu_text(fpt * tps, acc),
        "mfu_palm_percent": prepare.mfu_text(fpt_palm * tps, acc),
        "tokens_per_second": tps,
        "total_tokens_M": data.tokens_seen / 1e6,
        "num_steps": step,
        "num_params_M": n_params / 1e6,
        "depth": DEPTH,
        "epochs": data.epochs,
        "device": acc.name.replace(" ", "_"),
        "attention": attention,
        "compile": COMPILE,
        "recompiles": recompiles,
        "throughput_ok": "unknown" if not acc.peak else str(not warned_slow).lower(),
        "loop_seconds": train_end - t_loop,
        "corpus_sha256": data.meta["corpus_sha256"][:16],
    })


if __name__ == "__main__":
    main()
