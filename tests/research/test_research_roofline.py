"""Roofline placement from declared work, a model name, and the hardware table."""

from __future__ import annotations

import pytest

from assay import hardware
from assay.research.roofline import model_workload, place, roof, workload


def test_model_name_gives_batch1_decoding_work() -> None:
    w = model_workload("Llama-2 7B Q4_0")
    assert w.flops == pytest.approx(1.4e10)
    assert w.bytes == pytest.approx(7e9 * 4.5 / 8)
    assert w.intensity == pytest.approx(2 * 8 / 4.5)
    assert "7e+09 parameters" in w.basis
    assert model_workload("gpt2 124M f16").bytes == pytest.approx(124e6 * 2)


def test_unknown_when_nothing_is_declared() -> None:
    w = workload(None, None, "")
    assert w.intensity is None
    p = place(w, roof("", "", 1e12, 1e11))
    assert p.bound == "unknown"
    assert "unknown" in p.explanation
    assert model_workload("my favourite model").intensity is None
    assert model_workload("13B").bytes is None  # no weight format: bytes unknown


def test_memory_bound_with_distance_from_the_roof() -> None:
    r = roof("my cpu", "fp32", peak_flops=1e12, bandwidth=1e11)  # ridge 10 FLOP/byte
    w = workload(2e9, 1e9, "")  # intensity 2
    p = place(w, r, metric_value=10.0, rate=True)  # 10 units/s -> 20 GFLOP/s
    assert p.bound == "memory-bound"
    assert p.attainable == pytest.approx(2e11)
    assert p.achieved == pytest.approx(2e10)
    assert p.fraction == pytest.approx(0.1)
    assert "10%" in p.explanation and "GB/s" in p.explanation
    # a time metric divides instead
    assert place(w, r, metric_value=0.1, rate=False).fraction == pytest.approx(0.1)


def test_compute_bound_at_high_intensity() -> None:
    r = roof("x", "fp32", peak_flops=1e12, bandwidth=1e11)
    assert place(workload(1e12, 1e9, ""), r).bound == "compute-bound"


def test_peaks_come_from_the_hardware_table() -> None:
    name = hardware.CHIPS[0].name
    chip = hardware.lookup(name)
    assert chip is not None
    r = roof(name, "bf16")
    assert r.peak_flops == chip.peak("bf16")
    assert r.bandwidth == chip.bandwidth
    assert r.basis.startswith("hardware table")
    unknown = roof("Imaginary Accelerator 9000")
    assert unknown.peak_flops is None and "not in the hardware table" in unknown.basis
    assert place(workload(1.0, 1.0, ""), unknown).bound == "unknown"


def test_small_fractions_keep_two_digits() -> None:
    from assay.research.roofline import percent

    assert [percent(x) for x in (0.0034, 0.051, 0.34, 1.0)] == ["0.34%", "5.1%", "34%", "100%"]


def test_a_rate_above_the_roof_is_said_to_be_no_distance() -> None:
    r = roof("x", "fp32", peak_flops=1e10, bandwidth=1e11)
    above = place(workload(1e9, 1e6, ""), r, metric_value=20.0)  # 20 GFLOP/s on a 10 roof
    assert above.fraction == pytest.approx(2.0)
    assert "above the roof" in above.explanation and "fp32 peak" in above.explanation
    below = place(workload(1e9, 1e6, ""), r, metric_value=5.0)
    assert "above the roof" not in below.explanation
