"""Time causal SDPA forward+backward per backend at training shapes (needs a CUDA GPU).

    python attn_bench.py            # B16 H12 T2048 D128 and the default model's shape
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def bench(b: int, h: int, t: int, d: int, backend: str, reps: int = 20) -> float | None:
    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel([BACKENDS[backend]]):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(reps):
                start.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
    except RuntimeError as exc:
        print(f"  {backend}: not available ({str(exc).splitlines()[0][:80]})")
        return None
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    print(torch.__version__, torch.cuda.get_device_name(), "cudnn", torch.backends.cudnn.version())
    for b, h, t, d in ((16, 12, 2048, 128), (32, 6, 2048, 128), (32, 8, 2048, 128)):
        # causal fwd+bwd: 4*b*h*t*t*d/2 forward, 2.5x that backward (incl. recompute of P)
        flops = 3.5 * 2 * b * h * t * t * d
        print(f"B{b} H{h} T{t} D{d}")
        for name in BACKENDS:
            ms = bench(b, h, t, d, name)
            if ms is not None:
                print(f"  {name:9s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
