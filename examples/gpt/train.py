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
TOTAL_BATCH_SIZE = 2**19  # tokens per optimizer step
DEVICE_BATCH_SIZE = 32  # sequences per forward/backward (gradient accumulation fills up)
DEPTH = 6  # transformer blocks
MODEL_DIM = 2048  # width, rounded up to a multiple of HEAD_DIM
HEAD_DIM = 128
LR_MULT = 1.0  # multiplies every learning rate below
MATRIX_LR = 0.02  # Muon, for the blocks' weight matrices
EMBED_LR = 0.3  # Adam, token embedding
HEAD_LR = 0.004  # Adam, output layer
WARMUP_FRAC = 0.0  # share of the budget spent warming the learning rate up
WARMDOWN_FRAC = 0.4  # share of the budget at the end spent decaying it to zero
LOGIT_CAP = 15.0
COMPILE = "full"  # "none", "optimizer" (the fused optimizer steps only) or "full"
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


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(dim, 3 * heads * head_dim, bias=False)
        self.proj = nn.Linear(heads * head_dim, dim, bias=False)
        self.fc = nn.Linear(dim, 4 * dim, bias=False)
        self.out = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(norm(x)).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        q, k = norm(apply_rotary(q, cos, sin)), norm(apply_rotary(k, cos, sin))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return x + self.out(F.relu(self.fc(norm(x))).square())


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, head_dim: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, dim // head_dim, head_dim) for _ in range(depth))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.seq_len = seq_len
        cos, sin = rotary(seq_len, head_dim, self.embed.weight.device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self) -> None:
        nn.init.normal_(self.embed.weight, std=1.0)
        nn.init.normal_(self.head.weight, std=0.001)
        for blk in self.blocks:
            assert isinstance(blk, Block)
            bound = math.sqrt(3.0 / blk.qkv.in_features)
            for lin in (blk.qkv, blk.fc):
                nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.zeros_(blk.proj.weight)
            nn.init.zeros_(blk.out.weight)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Logits (B, T, vocab), or the mean loss when ``targets`` are given (the loss
        inside the model lets a compiled model fuse it with the output layer)."""
        t = idx.size(1)
        cos, sin = self.cos[:, :t], self.sin[:, :t]
        x = norm(self.embed(idx))
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(norm(x)).float()
        logits = LOGIT_CAP * torch.tanh(logits / LOGIT_CAP)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def matmul_params(self) -> int:
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith("embed"))


# --- optimizers: steps take learning rates as tensors, so a schedule never recompiles ----


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


def muon_step(params: list[torch.Tensor], grads: list[torch.Tensor], buf: torch.Tensor,
              lr: torch.Tensor, momentum: float = 0.95) -> None:
    g = torch.stack(grads)
    buf.lerp_(g, 1 - momentum)
    update = zeropower(g.lerp(buf, momentum))
    rows, cols = g.shape[-2:]
    update = update * max(1.0, rows / cols) ** 0.5
    new = torch.stack(params) - lr * update.to(g.dtype)
    torch._foreach_copy_(params, list(new.unbind(0)))


def adam_step(params: list[torch.Tensor], grads: list[torch.Tensor],
              m: list[torch.Tensor], v: list[torch.Tensor], step: torch.Tensor,
              lr: torch.Tensor, beta1: float = 0.8, beta2: float = 0.95,
              eps: float = 1e-10) -> None:
    for p, g, mi, vi in zip(params, grads, m, v, strict=True):
        mi.lerp_(g, 1 - beta1)
        vi.lerp_(g.square(), 1 - beta2)
        mhat = mi / (1 - beta1**step)
        vhat = vi / (1 - beta2**step)
        p.sub_(lr * mhat / (vhat.sqrt() + eps))


class Optimizer:
    def __init__(self, model: GPT, compiled: bool) -> None:
        dev = model.embed.weight.device
        matrices = [p for p in model.blocks.parameters() if p.ndim == 2]
        self.groups: dict[tuple[int, ...], list[nn.Parameter]] = {}
        for p in matrices:
            self.groups.setdefault(tuple(p.shape), []).append(p)
        self.bufs = {s: torch.zeros(len(ps), *s, device=dev) for s, ps in self.groups.items()}
        self.adam = [(model.embed.weight, EMBED_LR), (model.head.weight, HEAD_LR)]
        self.m = [torch.zeros_like(p) for p, _ in self.adam]
        self.v = [torch.zeros_like(p) for p, _ in self.adam]
        self.step_t = torch.zeros((), device=dev)
        self.lr_t = {name: torch.zeros((), device=dev) for name in ("matrix", "embed", "head")}
        self.muon = torch.compile(muon_step, dynamic=False) if compiled else muon_step
        self.adam_fn = torch.compile(adam_step, dynamic=False) if compiled else adam_step

    def step(self, scale: float) -> None:
        self.step_t.add_(1)
        self.lr_t["matrix"].fill_(MATRIX_LR * LR_MULT * scale)
        self.lr_t["embed"].fill_(EMBED_LR * LR_MULT * scale)
        self.lr_t["head"].fill_(HEAD_LR * LR_MULT * scale)
        for shape, ps in self.groups.items():
            self.muon([p.data for p in ps], [p.grad for p in ps],  # type: ignore[misc]
                      self.bufs[shape], self.lr_t["matrix"])
        for (p, _), m, v, key in zip(self.adam, self.m, self.v, ("embed", "head"), strict=True):
            self.adam_fn([p.data], [p.grad], [m], [v], self.step_t,  # type: ignore[list-item]
                         self.lr_t[key])

    def zero_grad(self) -> None:
        for ps in self.groups.values():
            for p in ps:
                p.grad = None
        for p, _ in self.adam:
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

    dim = math.ceil(MODEL_DIM / HEAD_DIM) * HEAD_DIM
    with torch.device(device):
        model = GPT(data.vocab_size, dim, DEPTH, HEAD_DIM, seq_len)
    model.init_weights()
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
    step = 0
    trained = 0.0  # seconds counted against the budget
    timed_tokens = 0
    warned_slow = False
    graphs_after_warmup = 0
    t_loop = time.time()
    while True:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.time()
        progress = min(trained / TIME_BUDGET, 1.0)
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            x, y = data.next_batch(DEVICE_BATCH_SIZE, seq_len)
            with autocast:
                loss = fwd(x, y)
            (loss / accum).backward()
            loss_sum += loss.detach()
        opt.step(lr_scale(progress))
        opt.zero_grad()
        loss_value = float(loss_sum.item()) / accum  # synchronizes
        dt = time.time() - t0
        guard.check(step, loss_value)
        step += 1
        if step <= warm_steps:
            if step == warm_steps:
                graphs_after_warmup = graphs_compiled()
                print(f"warm-up: {time.time() - T_START:.1f}s from start to first timed step")
            continue
        trained += dt
        timed_tokens += TOTAL_BATCH_SIZE
        if step % 20 == 0 or trained >= TIME_BUDGET:
            tps = timed_tokens / trained
            print(f"step {step:5d} | loss {loss_value:.4f} | {tps / 1e6:.3f}M tok/s | "
                  f"mfu {prepare.mfu_text(fpt * tps, acc)} | {trained:.0f}/{TIME_BUDGET:.0f}s "
                  f"| epoch {data.epochs:.2f}", flush=True)
        if not warned_slow and step == warm_steps + 10 and acc.peak:
            mfu = fpt * timed_tokens / trained / acc.peak
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
