"""The hardware table: name matching (variants before bare names), peaks, detection."""

from __future__ import annotations

import sys

import pytest

from assay import hardware as hw

TERA = 1e12


@pytest.mark.parametrize(("name", "chip", "bf16"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.4),
    ("NVIDIA H100", "NVIDIA H100 SXM", 989.4),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 835.5),
    ("NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3", 989.4),
    ("NVIDIA GH200 144G HBM3e", "NVIDIA GH200 144GB HBM3e", 989.4),
    ("NVIDIA H200", "NVIDIA H200 SXM", 989.4),
    ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 835.5),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM 80GB", 312),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM 40GB", 312),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe 40GB", 312),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 PCIe 80GB", 312),
    ("NVIDIA L40S", "NVIDIA L40S", 362.05),
    ("NVIDIA L4", "NVIDIA L4", 121),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", 165.2),
    ("NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090", 209.5),
    ("NVIDIA B200", "NVIDIA B200", 2250),
    ("AMD Instinct MI300X", "AMD Instinct MI300X", 1307.4),
])
def test_lookup_known_names(name: str, chip: str, bf16: float) -> None:
    found = hw.lookup(name)
    assert found is not None and found.name == chip
    assert hw.peak_flops(name) == pytest.approx(bf16 * TERA)


@pytest.mark.parametrize("name", [
    "NVIDIA H800", "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 4080",
    "Tesla V100-SXM2-16GB", "AMD EPYC", "", "some accelerator",
])
def test_unknown_names_are_none_never_a_guess(name: str) -> None:
    assert hw.lookup(name) is None
    assert hw.peak_flops(name) is None
    assert hw.memory_bandwidth(name) is None
    assert hw.mfu(1e15, name) is None


def test_variants_are_not_read_as_the_bare_part() -> None:
    sxm = hw.peak_flops("NVIDIA H100")
    for variant in ("NVIDIA H100 NVL", "NVIDIA H100 PCIe"):
        assert hw.peak_flops(variant) != sxm
    assert hw.memory_bandwidth("NVIDIA GH200 480GB") != hw.memory_bandwidth("NVIDIA H100")


def test_every_entry_matches_its_own_name_and_is_sane() -> None:
    for chip in hw.CHIPS:
        assert hw.lookup(chip.name) is chip, chip.name
        assert chip.source
        assert chip.kind in ("gpu", "cpu")
        assert chip.bandwidth and chip.bandwidth > 1e10
        assert set(chip.flops) <= set(hw.PRECISIONS)
        if chip.kind == "gpu":
            assert chip.flops["bf16"] >= chip.flops.get("fp32", 0.0)
            if "fp8" in chip.flops:
                assert chip.flops["fp8"] == pytest.approx(2 * chip.flops["bf16"], rel=0.02)


def test_bandwidth_ridge_and_mfu() -> None:
    h200 = hw.lookup("NVIDIA H200")
    assert h200 is not None
    assert h200.bandwidth == pytest.approx(4.8e12)
    assert h200.ridge("bf16") == pytest.approx(989.4e12 / 4.8e12)
    assert hw.mfu(989.4e12 / 2, "NVIDIA H200") == pytest.approx(0.5)
    assert hw.mfu(989.4e12, "NVIDIA H200", devices=2) == pytest.approx(0.5)
    # The figure that misled the original: an H100 peak applied to an RTX 5090.
    assert hw.mfu(100e12, "NVIDIA GeForce RTX 5090") == pytest.approx(100 / 209.5)
    b200 = hw.lookup("NVIDIA B200")
    assert b200 is not None and b200.peak("fp32") is None and b200.ridge("fp32") is None
    with pytest.raises(ValueError):
        h200.peak("int4")


def test_cpu_names() -> None:
    assert hw.lookup("Intel(R) Xeon(R) Platinum 8480+") is not None
    epyc = hw.lookup("AMD EPYC 9654 96-Core Processor")
    assert epyc is not None and epyc.kind == "cpu"
    assert epyc.peak("fp32") == pytest.approx(96 * 2.4e9 * 32)
    info = ("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
            "model name\t: AMD EPYC 7763 64-Core Processor\n")
    assert hw.cpu_model(info) == "AMD EPYC 7763 64-Core Processor"
    if sys.platform.startswith("linux"):
        assert hw.cpu_model("flags\t: fpu\n") == ""


def test_parse_nvidia_smi() -> None:
    text = ("0, NVIDIA H100 PCIe, 81559, 9.0\n"
            "1, NVIDIA GeForce RTX 5090, 32607, 12.0\n"
            "2, NVIDIA Future GPU, 1000, 11.0\n")
    devs = hw.parse_nvidia_smi(text)
    assert [d.index for d in devs] == [0, 1, 2]
    assert devs[0].chip is not None and devs[0].chip.name == "NVIDIA H100 PCIe"
    assert devs[0].capability == (9, 0)
    assert devs[0].memory == pytest.approx(81559 * 1024**2)
    assert devs[1].chip is not None and devs[1].chip.peak() == pytest.approx(209.5e12)
    assert devs[2].chip is None and not devs[2].known
    assert "unknown" in hw.describe(devs[2])
    assert "209.5 TFLOP/s" in hw.describe(devs[1])


def test_detect_runs_here() -> None:
    devices = hw.detect()
    assert devices and devices[-1].kind == "cpu"
    assert devices[-1].cores is not None and devices[-1].cores >= 1
    for dev in devices:
        assert isinstance(hw.describe(dev), str)
