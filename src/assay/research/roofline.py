"""Roofline placement: is the work compute-bound or memory-bound, and how far from the roof.

Peaks come from ``[research]`` when declared (``peak_flops``, ``bandwidth``), else from
:mod:`assay.hardware` (the one table of devices), else, for the device research runs on
(or always with ``measure``), from measuring it (:mod:`.peaks`): a STREAM triad and a
matmul, cached per machine. With both a table row and a measurement the brief shows both.

Each hot spot is classified on its own where its op's work per element is known
(:func:`op_bound`: elementwise ops, norms, softmax, copies, batch-1 matrix-vector
products), else by the whole-benchmark estimate.

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
from pathlib import Path

from .. import hardware
from .peaks import Peaks, measured

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
    basis: str  # "hardware table: <chip>", "declared in [research]", "measured ...", or why
    table_flops: float | None = None  # the vendor figure, where the table has one
    table_bandwidth: float | None = None

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


def batched(work: Workload, batch: float) -> Workload:
    """The work per token when ``batch`` tokens share each read of the weights (a prompt
    processed in one batch): the same FLOP, the bytes divided by the batch."""
    if work.bytes is None:
        return work
    return Workload(work.flops, work.bytes / batch,
                    f"{work.basis}; {batch:g} tokens per read of the weights")


def roof(device: str = "", precision: str = "", peak_flops: float | None = None,
         bandwidth: float | None = None, *, measure: bool = False,
         cache_dir: Path | None = None) -> Roof:
    """The roof for ``device`` (a name), or for the first device detected here.

    The detected device is measured when the table has no row for it, or with
    ``measure``; a named device is never measured (it may not be this machine).
    """
    name = device
    kind = ""
    chip = None
    detected = not name
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
    table_peak = chip.peak(prec) if chip is not None else None
    table_bw = chip.bandwidth if chip is not None else None
    declared = peak_flops is not None or bandwidth is not None
    peak = peak_flops if peak_flops is not None else table_peak
    bw = bandwidth if bandwidth is not None else table_bw
    if declared:
        basis = "declared in [research]" + (f" and hardware table ({chip.name})" if chip
                                            else "")
    elif chip is not None:
        basis = f"hardware table: {chip.name}"
    else:
        basis = (f"{name or 'this device'} is not in the hardware table: peaks unknown "
                 "(declare peak_flops and bandwidth in [research])")
    want = detected and (measure or peak is None or bw is None)
    if want and not (peak_flops is not None and bandwidth is not None):
        got = measured("gpu" if kind == "gpu" else "cpu", where=cache_dir)
        if got is not None:
            peak, bw, basis = _with_measured(got, prec, peak_flops, bandwidth, chip)
    return Roof(name or "unknown device", peak, bw, prec, basis, table_peak, table_bw)


def _with_measured(got: Peaks, prec: str, peak_flops: float | None,
                   bandwidth: float | None, chip: hardware.Chip | None
                   ) -> tuple[float | None, float | None, str]:
    rate = got.flops.get(prec) or got.flops.get("fp32")
    used = prec if prec in got.flops else "fp32"
    peak = peak_flops if peak_flops is not None else (rate.value if rate else None)
    bw = bandwidth if bandwidth is not None else (got.bandwidth.value if got.bandwidth
                                                  else None)
    parts = []
    if got.bandwidth is not None:
        parts.append(f"bandwidth {got.bandwidth.value / 1e9:.3g} GB/s (spread "
                     f"{got.bandwidth.spread:.1%}; {got.bandwidth.method})")
    if rate is not None:
        parts.append(f"{used} {rate.value / 1e9:.4g} GFLOP/s (spread {rate.spread:.1%}; "
                     f"{rate.method})")
    basis = f"measured on this machine, cache {got.fingerprint}: " + "; ".join(parts)
    if chip is not None:
        basis += f"; hardware table ({chip.name}) for comparison"
    return peak, bw, basis


# FLOP and bytes per element of f32 tensors, by op family: (flop, bytes, how counted)
_OP_WORK: tuple[tuple[frozenset[str], float, float, str], ...] = (
    (frozenset({"add", "sub", "mul", "div", "add1", "add_id"}), 1, 12,
     "1 FLOP per element, two reads and a write"),
    (frozenset({"scale", "silu", "gelu", "gelu_quick", "gelu_erf", "relu", "tanh", "exp",
                "sigmoid", "neg", "abs", "sqr", "sqrt", "log", "sin", "cos", "clamp",
                "leaky_relu", "hardswish", "hardsigmoid", "elu", "step", "softplus",
                "swiglu", "geglu", "reglu", "glu", "swiglu_oai", "unary"}), 4, 8,
     "about 4 FLOP per element, a read and a write"),
    (frozenset({"rms_norm", "norm", "group_norm", "l2_norm", "rms_norm_back",
                "norm_mul", "layer_norm"}), 3, 12,
     "3 FLOP per element over two passes that read and one write"),
    (frozenset({"soft_max", "softmax", "soft_max_back", "log_softmax"}), 5, 16,
     "5 FLOP per element (max, subtract, exp, sum, scale) over three passes"),
    (frozenset({"rope", "rope_back", "rope_multi"}), 6, 8,
     "6 FLOP per element, a read and a write"),
    (frozenset({"sum", "sum_rows", "mean", "argmax", "count_equal", "cumsum"}), 1, 4,
     "1 FLOP per element read"),
    (frozenset({"cpy", "dup", "cont", "get_rows", "set_rows", "concat", "transpose",
                "permute", "repeat", "pad", "acc", "set", "view", "reshape"}), 0, 8,
     "no arithmetic: data movement only"),
)


def op_bound(op: str, r: Roof | None, work: Workload | None = None
             ) -> tuple[str, str] | None:
    """(bound, the numbers) for one op on this roof, or None where its work is unknown."""
    if r is None or r.ridge is None:
        return None
    key = op.lower()
    if key in ("mul_mat", "mul_mat_id", "matmul", "gemv", "gemm", "out_prod"):
        oi = work.intensity if work is not None and work.intensity is not None else 0.5
        how = ("the declared work per unit" if work is not None and work.intensity
               is not None else "batch-1 f32 matrix-vector: 2 FLOP per 4-byte weight; "
               "quantized weights and larger batches raise it")
    else:
        found = next(((f, b, h) for ops, f, b, h in _OP_WORK if key in ops), None)
        if found is None:
            return None
        flop, nbytes, how = found
        oi = flop / nbytes
    bound = "memory-bound" if oi < r.ridge else "compute-bound"
    return bound, (f"{oi:.2g} FLOP/byte ({how}) vs ridge {r.ridge:.3g} FLOP/byte "
                   f"({r.basis.split(':')[0]})")


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
        if fraction > 1:
            text += (f"; above the roof: the work runs faster than the {r.precision} peak "
                     "allows, so it uses another arithmetic (integer dot products, a lower "
                     "precision) or the peak is low; its fraction is not a distance to the "
                     "roof")
    else:
        text += "; achieved rate unknown (metric not read)"
    return Placement(bound, oi, ridge, attainable, achieved, fraction, text)

