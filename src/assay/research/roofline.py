"""Roofline placement: is the work compute-bound or memory-bound, and how far from the roof.

Peaks come from :mod:`assay.hardware` (the one table of devices); ``[research]`` may
override them for a device the table does not know (``peak_flops``, ``bandwidth``).

Operational intensity needs the work per unit of the metric. Two ways to get it:

* declared: ``flops`` and ``bytes`` per unit of the metric (per token, per image, per
  iteration) in ``[research]``;
* a model name (``model = "llama 7B q4_0"``): batch-1 decoding of a dense model of *N*
  parameters at *b* bits per weight does about 2N FLOP and reads N·b/8 bytes per token.

Without either, intensity is **unknown** and the result says so; no guess is made. The
estimate is for the whole benchmark; each hot spot inherits it and says so.

The achieved rate is the metric times the work per unit (a rate metric, e.g. tokens/s) or
the work over the metric (a time metric, seconds per unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import hardware

# bits per weight of common storage formats (block formats include their scales)
_BITS = (
    (r"\b(f32|fp32|float32)\b", 32.0), (r"\b(f16|fp16|float16|half)\b", 16.0),
    (r"\b(bf16|bfloat16)\b", 16.0), (r"\b(fp8|f8|e4m3|e5m2)\b", 8.0),
    (r"\bq8_0\b", 8.5), (r"\b(int8|i8|w8a8|w8)\b", 8.0), (r"\bq6_k\b", 6.5625),
    (r"\bq5_k(_[ms])?\b", 5.5), (r"\bq5_[01]\b", 5.5), (r"\bq4_k(_[ms])?\b", 4.5),
    (r"\bq4_[01]\b", 4.5), (r"\b(int4|i4|w4a16|w4|nf4|awq|gptq)\b", 4.0),
    (r"\bq3_k(_[sml])?\b", 3.4375), (r"\bq2_k\b", 2.625),
)
_PARAMS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bm])\b", re.I)


@dataclass(frozen=True)
class Workload:
    """Work per unit of the metric, and where the figure came from."""

    flops: float | None
    bytes: float | None
    basis: str  # "declared", "model name 'llama 7B q4_0'", or why unknown

    @property
    def intensity(self) -> float | None:
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes


@dataclass(frozen=True)
class Roof:
    device: str
    peak_flops: float | None
    bandwidth: float | None
    precision: str
    basis: str  # "hardware table: <chip>", "declared in [research]", or why unknown

    @property
    def ridge(self) -> float | None:
        if self.peak_flops is None or not self.bandwidth:
            return None
        return self.peak_flops / self.bandwidth


@dataclass(frozen=True)
class Placement:
    bound: str  # "memory-bound", "compute-bound", "unknown"
    intensity: float | None
    ridge: float | None
    attainable: float | None  # FLOP/s the roof allows at this intensity
    achieved: float | None  # FLOP/s measured (when the metric could be read)
    fraction: float | None  # achieved / attainable
    explanation: str


def percent(x: float) -> str:
    """A fraction as a percentage with two significant digits: 34%, 5.1%, 0.34%."""
    return f"{x * 100:.2g}%" if x * 100 < 10 else f"{x:.0%}"


def model_workload(name: str) -> Workload:
    """Per-token work of batch-1 decoding from a model name such as ``"7B q4_0"``."""
    text = name.lower()
    m = _PARAMS.search(text)
    if not m:
        return Workload(None, None, f"model name {name!r} gives no parameter count "
                        "(write it like '7B' or '125M'): intensity unknown")
    params = float(m[1]) * (1e9 if m[2].lower() == "b" else 1e6)
    bits = next((b for pat, b in _BITS if re.search(pat, text)), None)
    if bits is None:
        return Workload(2 * params, None, f"model name {name!r} gives no weight format "
                        "(f16, bf16, q8_0, q4_0, int4 ...): bytes per token unknown")
    return Workload(2 * params, params * bits / 8.0,
                    f"model name {name!r}: {params:.3g} parameters at {bits:g} bits per "
                    "weight, batch-1 decoding (2N FLOP and N·bits/8 bytes per token)")


def workload(flops: float | None, nbytes: float | None, model: str) -> Workload:
    if flops is not None and nbytes is not None:
        return Workload(flops, nbytes, "declared in [research] (flops, bytes per unit)")
    if model:
        return model_workload(model)
    missing = "bytes" if flops is not None else "flops" if nbytes is not None else \
        "flops and bytes"
    return Workload(flops, nbytes, f"no {missing} per unit declared and no model name in "
                    "[research]: operational intensity unknown")


def roof(device: str = "", precision: str = "", peak_flops: float | None = None,
         bandwidth: float | None = None) -> Roof:
    """The roof for ``device`` (a name), or for the first device detected here."""
    name = device
    kind = ""
    chip = None
    if name:
        chip = hardware.lookup(name)
        kind = chip.kind if chip else ""
    else:
        try:
            found = hardware.detect()
        except Exception:  # detection is best effort
            found = []
        dev = next((d for d in found if d.kind == "gpu"), found[-1] if found else None)
        if dev is not None:
            name, chip, kind = dev.name, dev.chip, dev.kind
    prec = precision or ("bf16" if kind == "gpu" else "fp32")
    peak = peak_flops
    bw = bandwidth
    if chip is not None:
        peak = peak if peak is not None else chip.peak(prec)
        bw = bw if bw is not None else chip.bandwidth
    if peak_flops is not None or bandwidth is not None:
        basis = "declared in [research]" + (f" and hardware table ({chip.name})" if chip
                                            else "")
    elif chip is not None:
        basis = f"hardware table: {chip.name}"
    else:
        basis = (f"{name or 'this device'} is not in the hardware table: peaks unknown "
                 "(declare peak_flops and bandwidth in [research])")
    return Roof(name or "unknown device", peak, bw, prec, basis)


def place(work: Workload, r: Roof, metric_value: float | None = None,
          rate: bool = True, measured_under: str = "") -> Placement:
    """Where the benchmark sits under the roof. ``rate``: the metric is units per second."""
    oi = work.intensity
    ridge = r.ridge
    if oi is None:
        return Placement("unknown", None, ridge, None, None, None, work.basis)
    if ridge is None or r.peak_flops is None or r.bandwidth is None:
        return Placement("unknown", oi, None, None, None, None,
                         f"intensity {oi:.3g} FLOP/byte, but the roof is unknown ({r.basis})")
    bound = "memory-bound" if oi < ridge else "compute-bound"
    attainable = min(r.peak_flops, oi * r.bandwidth)
    achieved = None
    if metric_value is not None and metric_value > 0 and work.flops is not None:
        achieved = metric_value * work.flops if rate else work.flops / metric_value
    fraction = achieved / attainable if achieved is not None and attainable > 0 else None
    text = (f"intensity {oi:.3g} FLOP/byte vs ridge {ridge:.3g} on {r.device} "
            f"({r.precision}): {bound}; the roof allows {attainable / 1e9:.3g} GFLOP/s")
    if fraction is not None and achieved is not None:
        text += f", measured {achieved / 1e9:.3g} GFLOP/s = {percent(fraction)} of it"
        if bound == "memory-bound" and work.bytes:
            bw_used = achieved / oi
            text += f" ({bw_used / 1e9:.3g} GB/s of {r.bandwidth / 1e9:.3g} GB/s)"
        if measured_under:
            text += f"; measured under {measured_under}, so a lower bound"
    else:
        text += "; achieved rate unknown (metric not read)"
    return Placement(bound, oi, ridge, attainable, achieved, fraction, text)
