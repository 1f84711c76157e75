"""The step time, tokens/s and MFU of examples/gpt's training step, and where the GPU time
goes: a probe of a few steps, for choosing knobs by throughput before a 300 s run.

    python benchmarks/gpt_probe.py                          # the committed defaults
    python benchmarks/gpt_probe.py --set MODEL_DIM=768 --set DEPTH=6
    python benchmarks/gpt_probe.py --profile                # and the kernels, by GPU time

Builds the model, optimizer and compiled step exactly as `train.py` does (its knobs,
rewritten in memory by ``--set``), runs 4 steps to compile and warm up, times the next 10
(synchronised at both ends) and prints one line: step time, tokens/s and MFU in the PaLM
count (6N + 12·L·T·d over the GPU's dense bf16 peak, as `train.py` prints it). Over a
300 s run MFU comes out about one point higher (the probe's steps include the first
ones after compilation). ``--profile`` then profiles 5 more steps with the PyTorch
profiler and prints the 40 largest entries by GPU time. Needs the corpus
(``python examples/gpt/prepare.py``); ``GPT_PRESET=tiny`` runs on a CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

GPT = Path(__file__).resolve().parents[1] / "examples" / "gpt"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a knob of train.py, e.g. MODEL_DIM=640 (repeatable)")
    ap.add_argument("--profile", action="store_true", help="print the kernels by GPU time")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(GPT))
    os.chdir(GPT)
    import prepare  # type: ignore[import-not-found]
    import torch
    import train as t  # type: ignore[import-not-found]

    for item in args.set:
        name, _, value = item.partition("=")
        if not hasattr(t, name) or not name.isupper():
            print(f"gpt_probe: train.py has no knob {name!r}", file=sys.stderr)
            return 2
        setattr(t, name, type(getattr(t, name))(value))
        print(f"{name} = {getattr(t, name)}")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    data = prepare.Data(device, prepare.preset(t.ACTIVE_PRESET))
    seq = data.seq_len
    t.set_attention(t.pick_attention(device, t.ATTENTION), device)
    dim = math.ceil(t.MODEL_DIM / t.HEAD_DIM) * t.HEAD_DIM
    with torch.device(device):
        model = t.GPT(data.vocab_size, dim, t.DEPTH, t.HEAD_DIM, seq)
    model.init_weights()
    if cuda:
        model.embed.to(getattr(torch, t.EMBED_DTYPE))
        model.values.to(getattr(torch, t.EMBED_DTYPE))
    opt = t.Optimizer(model, compiled=t.COMPILE in ("optimizer", "full"))
    fwd: Any = torch.compile(model, dynamic=False) if t.COMPILE == "full" else model
    accum = t.TOTAL_BATCH_SIZE // (t.DEVICE_BATCH_SIZE * seq)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda)

    def step(i: int) -> None:
        for _ in range(accum):
            x, y = data.next_batch(t.DEVICE_BATCH_SIZE, seq)
            with autocast:
                loss = fwd(x, y)
            (loss / accum).backward()
        opt.step(1.0, i, 0.1)
        opt.zero_grad()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    t0 = time.time()
    for i in range(4):
        step(i)
    sync()
    print(f"compile and warm-up: {time.time() - t0:.1f}s")
    t0 = time.time()
    for i in range(4, 14):
        step(i)
    sync()
    dt = (time.time() - t0) / 10
    fpt = prepare.flops_per_token(model.matmul_params(), t.DEPTH, seq, dim)
    palm = fpt + 6.0 * t.DEPTH * seq * dim
    acc = prepare.accelerator(device, "bf16" if cuda else "fp32")
    tps = t.TOTAL_BATCH_SIZE / dt
    mfu = prepare.mfu_text(palm * tps, acc)
    print(f"depth {t.DEPTH}, width {dim}, batch {t.TOTAL_BATCH_SIZE} = {accum} x "
          f"{t.DEVICE_BATCH_SIZE} x {seq}: step {dt * 1000:.1f} ms, {tps:,.0f} tokens/s, "
          f"MFU (PaLM) {mfu}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for i in range(14, 19):
                step(i)
            sync()
        key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=90))
    return 0


if __name__ == "__main__":
    sys.exit(main())
