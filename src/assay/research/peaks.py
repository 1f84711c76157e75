"""Measured peaks of this machine: memory bandwidth and arithmetic rate, for the roofline.

Where the hardware table has no row for the device (a cloud VM's CPU often reports no
model number), or when asked to, research measures the peaks of the slot it runs on:

* **bandwidth**: a STREAM-style triad ``a = b + s*c`` over fp32 arrays each four times the
  last-level cache (at least 64 MiB), on every core this process may use (torch's
  ``add(..., alpha=s, out=a)``, one pass, threads = cores); without torch, numpy's
  ``add(b, c, out=a)`` in one process per core. Bytes counted the STREAM way: three
  arrays per pass, write-allocate traffic not counted, so a lower bound of what the
  memory moves.
* **compute**: a dense matmul, ``2 n^3`` FLOP, fp32 (torch or numpy's BLAS), and bf16 /
  fp16 where the hardware has them (CPU flags ``avx512_bf16``, ``amx_bf16``,
  ``avx512_fp16``; any CUDA GPU).
* on a CUDA GPU (torch), the same triad in device memory and matmuls in fp32 (TF32 off),
  bf16 and fp16.

Each figure is the median of several timed repeats after a warm-up, with the spread
((max - min) / median) and the method in words. Results are cached per machine
fingerprint (CPU model and flags, usable cores, memory, GPUs) in the user's cache
directory, so a second research run does not measure again.

``python -m assay.research.measure --json`` prints them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import hardware

REPEATS = 5
MIB = 1024**2


@dataclass(frozen=True)
class Measured:
    value: float  # median: bytes/s or FLOP/s
    spread: float  # (max - min) / median over the repeats
    repeats: int
    method: str


@dataclass(frozen=True)
class Peaks:
    device: str
    kind: str  # cpu or gpu
    fingerprint: str
    bandwidth: Measured | None = None
    flops: dict[str, Measured] = field(default_factory=dict)  # precision -> rate
    notes: tuple[str, ...] = ()
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Peaks:
        bw = data.get("bandwidth")
        return cls(str(data["device"]), str(data["kind"]), str(data["fingerprint"]),
                   Measured(**bw) if bw else None,
                   {k: Measured(**v) for k, v in dict(data.get("flops", {})).items()},
                   tuple(data.get("notes", ())), float(data.get("at", 0.0)))

    def summary(self) -> str:
        parts = []
        if self.bandwidth is not None:
            parts.append(f"triad {self.bandwidth.value / 1e9:.3g} GB/s "
                         f"(spread {self.bandwidth.spread:.1%})")
        for prec, m in self.flops.items():
            parts.append(f"{prec} {m.value / 1e9:.4g} GFLOP/s (spread {m.spread:.1%})")
        return f"{self.device}: " + ", ".join(parts)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def llc_bytes() -> int:
    """The last-level cache size (bytes), 32 MiB where it cannot be read."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            text = (idx / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or 32 * MIB


def fingerprint(kind: str) -> str:
    """What identifies this machine's peaks: processor, flags, cores, memory, GPUs."""
    gpus = [d.name for d in hardware.detect_gpus()] if kind == "gpu" else []
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = 0
    key = json.dumps([kind, platform.machine(), hardware.cpu_model(),
                      list(hardware.cpu_flags()), cores(), mem // (1024 * MIB), gpus])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "assay" / "peaks"


def _timed(run: Callable[[], object], repeats: int, sync: Callable[[], None]) -> list[float]:
    run()
    sync()
    out = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        run()
        sync()
        out.append(time.perf_counter() - t)
    return out


def _measured(work: float, times: list[float], method: str) -> Measured:
    rates = [work / t for t in times if t > 0]
    med = statistics.median(rates)
    return Measured(med, (max(rates) - min(rates)) / med if med else 0.0, len(rates), method)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def load_note(n_cores: int) -> list[str]:
    """A note when other work shares the cores (the figures are then lower bounds)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return []
    if load <= 0.5 * n_cores + 0.5:
        return []
    return [f"load average {load:.1f} on {n_cores} cores while measuring: other work "
            "shared the machine, so these figures are lower bounds of its peaks"]


def _mm(torch: Any, x: Any, y: Any) -> Callable[[], object]:
    return lambda: torch.mm(x, y)


def _triad(torch: Any, n: int, device: Any, repeats: int, sync: Callable[[], None]
           ) -> list[float]:
    a, b, c = (torch.empty(n, dtype=torch.float32, device=device) for _ in range(3))
    b.fill_(1.0)
    c.fill_(2.0)
    return _timed(lambda: torch.add(b, c, alpha=3.0, out=a), repeats, sync)


def measure_cpu(repeats: int = REPEATS, quick: bool = False) -> Peaks:
    n_cores = cores()
    name = f"CPU {hardware.cpu_model() or 'unknown'} ({n_cores} cores of this slot)"
    arr = (4 * MIB if quick else max(64 * MIB, 4 * llc_bytes())) // 4
    torch = _torch()
    notes: list[str] = load_note(n_cores)
    flops: dict[str, Measured] = {}
    if torch is not None:
        torch.set_num_threads(n_cores)
        times = _triad(torch, arr, None, repeats, lambda: None)
        bw = _measured(3 * 4 * arr, times, f"STREAM triad a = b + 3c, torch.add, fp32, "
                       f"3 arrays x {arr * 4 // MIB} MiB, {n_cores} threads, median of "
                       f"{repeats}; 12 bytes per element counted")
        n = 256 if quick else 1536
        flags = set(hardware.cpu_flags())
        precisions = [("fp32", torch.float32)]
        if flags & {"avx512_bf16", "amx_bf16"}:
            precisions.append(("bf16", torch.bfloat16))
        else:
            notes.append("no bf16 arithmetic in the CPU flags (avx512_bf16, amx_bf16): "
                         "bf16 not measured")
        if "avx512_fp16" in flags:
            precisions.append(("fp16", torch.float16))
        for prec, dt in precisions:
            x = torch.randn(n, n, dtype=torch.float32).to(dt)
            y = torch.randn(n, n, dtype=torch.float32).to(dt)
            times = _timed(_mm(torch, x, y), repeats, lambda: None)
            flops[prec] = _measured(2.0 * n**3, times, f"matmul {n}x{n}x{n} {prec}, "
                                    f"torch.mm, {n_cores} threads, median of {repeats}")
    else:
        import numpy as np

        a, b, c = (np.empty(arr, dtype=np.float32) for _ in range(3))
        b.fill(1.0)
        c.fill(2.0)
        times = _timed(lambda: np.add(b, c, out=a), repeats, lambda: None)
        bw = _measured(3 * 4 * arr, times, f"STREAM add a = b + c, numpy, fp32, 3 arrays x "
                       f"{arr * 4 // MIB} MiB, one thread, median of {repeats}")
        notes.append("torch is not installed: bandwidth measured on one thread (a lower "
                     "bound)")
        n = 256 if quick else 1536
        x = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        times = _timed(lambda: np.dot(x, x), repeats, lambda: None)
        flops["fp32"] = _measured(2.0 * n**3, times, f"matmul {n}x{n}x{n} fp32, numpy BLAS, "
                                  f"median of {repeats}")
    return Peaks(name, "cpu", fingerprint("cpu"), bw, flops, tuple(notes), time.time())


def measure_gpu(repeats: int = REPEATS, quick: bool = False) -> Peaks | None:
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return None
    dev = torch.device("cuda", 0)
    name = f"GPU {torch.cuda.get_device_name(0)}"
    arr = (16 if quick else 1024) * MIB // 4
    sync = torch.cuda.synchronize
    times = _triad(torch, arr, dev, repeats, sync)
    bw = _measured(3 * 4 * arr, times, f"STREAM triad a = b + 3c in device memory, fp32, "
                   f"3 arrays x {arr * 4 // MIB} MiB, median of {repeats}")
    flops: dict[str, Measured] = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 1024 if quick else 8192
    for prec, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16),
                     ("fp16", torch.float16)):
        x = torch.randn(n, n, device=dev, dtype=dt)
        y = torch.randn(n, n, device=dev, dtype=dt)
        times = _timed(_mm(torch, x, y), repeats, sync)
        flops[prec] = _measured(2.0 * n**3, times, f"matmul {n}x{n}x{n} {prec} (TF32 off), "
                                f"torch.mm, median of {repeats}")
    return Peaks(name, "gpu", fingerprint("gpu"), bw, flops, (), time.time())


def measured(kind: str = "cpu", *, refresh: bool = False, where: Path | None = None,
             quick: bool = False) -> Peaks | None:
    """This machine's peaks (``cpu`` or ``gpu``), from the cache or measured now."""
    folder = where or cache_dir()
    path = folder / f"{kind}-{fingerprint(kind)}{'-quick' if quick else ''}.json"
    if not refresh:
        try:
            return Peaks.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    peaks = measure_gpu(quick=quick) if kind == "gpu" else measure_cpu(quick=quick)
    if peaks is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(peaks.to_json(), indent=1), encoding="utf-8")
        tmp.replace(path)
    return peaks
