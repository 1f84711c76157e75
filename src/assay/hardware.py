"""Peak arithmetic rates and memory bandwidths of accelerators and CPUs, and detection.

One table, shared by the research subsystem (rooflines) and the examples (MFU). The module
uses the standard library only, so an example can import it without assay's dependencies.

Every figure is a *dense* rate (no 2:4 sparsity), in FLOP/s, per device (one GPU, one CPU
socket). Vendors often print the sparse figure first; it is twice the dense one and is never
used here. Tensor-core rates for GeForce cards are the ones with FP32 accumulation, which is
what a bf16 training step uses. Where a figure is not known with confidence it is left out
(``None``), and lookups of an unknown model return ``None`` rather than a guess.

Precisions: ``fp64``, ``fp32`` (plain, non-tensor-core), ``tf32``, ``bf16``, ``fp16``,
``fp8``. Bandwidth is in bytes/s, memory in bytes.

Sources, per entry in ``source``: the vendor's datasheet for that part, or, for CPUs,
cores x base clock x FLOP per cycle per core from the vendor's microarchitecture manual
(an upper bound that all-core turbo can exceed slightly and AVX-512 clocks can undercut).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

T = 1e12
G = 1e9
GIB = 1024**3


@dataclass(frozen=True)
class Chip:
    """One model of processor: its peak dense rates and memory system."""

    name: str
    kind: str  # "gpu" or "cpu"
    vendor: str
    patterns: tuple[str, ...]  # regexes, full-matched against the normalized name
    flops: dict[str, float] = field(default_factory=dict)  # precision -> FLOP/s, dense
    bandwidth: float | None = None  # bytes/s
    memory: float | None = None  # bytes
    source: str = ""

    def peak(self, precision: str = "bf16") -> float | None:
        """Peak dense FLOP/s at ``precision``, or None where the table has no figure."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PRECISIONS)}")
        return self.flops.get(precision)

    def ridge(self, precision: str = "bf16") -> float | None:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory to compute."""
        peak = self.peak(precision)
        if peak is None or not self.bandwidth:
            return None
        return peak / self.bandwidth


def _f(**rates: float) -> dict[str, float]:
    return {k: v * T for k, v in rates.items()}


# Order matters: the first entry whose pattern matches wins, so the specific variants
# (NVL, PCIe, GH200, HBM3e) come before the bare names they contain.
CHIPS: tuple[Chip, ...] = (
    # --- NVIDIA Hopper -------------------------------------------------------------------
    Chip("NVIDIA GH200 144GB HBM3e", "gpu", "nvidia",
         (r"gh200.*(144|hbm3e).*",),
         _f(fp64=67, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
         4.9e12, 144e9, "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e variant)"),
    Chip("NVIDIA GH200 96GB HBM3", "gpu", "nvidia",
         (r"gh200.*",),
         _f(fp64=67, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
         4.0e12, 96e9, "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3 variant)"),
    Chip("NVIDIA H200 NVL", "gpu", "nvidia",
         (r"h200.*nvl.*",),
         _f(fp64=34, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
         4.8e12, 141e9, "NVIDIA H200 datasheet, NVL column (sparse figures halved)"),
    Chip("NVIDIA H200 SXM", "gpu", "nvidia",
         (r"h200( sxm5?)?( 141gb)?( hbm3e)?",),
         _f(fp64=34, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
         4.8e12, 141e9, "NVIDIA H200 datasheet, SXM column (sparse figures halved)"),
    Chip("NVIDIA H100 NVL", "gpu", "nvidia",
         (r"h100.*nvl.*",),
         _f(fp64=30, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
         3.9e12, 94e9, "NVIDIA H100 datasheet, NVL column (sparse figures halved)"),
    Chip("NVIDIA H100 PCIe", "gpu", "nvidia",
         (r"h100.*pcie.*",),
         _f(fp64=26, fp32=51, tf32=378, bf16=756, fp16=756, fp8=1513),
         2.0e12, 80e9, "NVIDIA H100 datasheet, PCIe column (sparse figures halved)"),
    Chip("NVIDIA H100 SXM", "gpu", "nvidia",
         (r"h100( sxm5?)?( 80gb)?( hbm3)?",),
         _f(fp64=34, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
         3.35e12, 80e9, "NVIDIA H100 datasheet, SXM column (sparse figures halved)"),
    # --- NVIDIA Blackwell ----------------------------------------------------------------
    Chip("NVIDIA B200", "gpu", "nvidia",
         (r"b200( sxm6?)?( \d+gb)?( hbm3e)?",),
         _f(fp64=40, tf32=1125, bf16=2250, fp16=2250, fp8=4500),
         8.0e12, 180e9, "NVIDIA HGX B200 datasheet, per GPU (sparse figures halved)"),
    Chip("NVIDIA GeForce RTX 5090", "gpu", "nvidia",
         (r"(geforce )?rtx 5090",),
         _f(fp32=104.8, tf32=104.8, bf16=209.5, fp16=209.5, fp8=419),
         1.792e12, 32 * GIB,
         "NVIDIA RTX Blackwell GPU architecture whitepaper (FP32-accumulate tensor rates)"),
    # --- NVIDIA Ada ----------------------------------------------------------------------
    Chip("NVIDIA GeForce RTX 4090", "gpu", "nvidia",
         (r"(geforce )?rtx 4090",),
         _f(fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2, fp8=330.3),
         1.008e12, 24 * GIB,
         "NVIDIA Ada GPU architecture whitepaper (FP32-accumulate tensor rates)"),
    Chip("NVIDIA L40S", "gpu", "nvidia",
         (r"l40s",),
         _f(fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733),
         864e9, 48e9, "NVIDIA L40S datasheet (sparse figures halved)"),
    Chip("NVIDIA L40", "gpu", "nvidia",
         (r"l40",),
         _f(fp32=90.5, tf32=90.5, bf16=181, fp16=181, fp8=362),
         864e9, 48e9, "NVIDIA L40 datasheet (sparse figures halved)"),
    Chip("NVIDIA L4", "gpu", "nvidia",
         (r"l4",),
         _f(fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5),
         300e9, 24e9, "NVIDIA L4 datasheet (sparse figures halved)"),
    # --- NVIDIA Ampere -------------------------------------------------------------------
    Chip("NVIDIA A100 PCIe 40GB", "gpu", "nvidia",
         (r"a100[- ]pcie[- ]40gb", r"a100 40gb pcie"),
         _f(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312),
         1.555e12, 40e9, "NVIDIA A100 datasheet, PCIe 40GB"),
    Chip("NVIDIA A100 PCIe 80GB", "gpu", "nvidia",
         (r"a100.*pcie.*",),
         _f(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312),
         1.935e12, 80e9, "NVIDIA A100 datasheet, PCIe 80GB"),
    Chip("NVIDIA A100 SXM 40GB", "gpu", "nvidia",
         (r"a100[- ]sxm4?[- ]40gb", r"a100 40gb"),
         _f(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312),
         1.555e12, 40e9, "NVIDIA A100 datasheet, SXM 40GB"),
    Chip("NVIDIA A100 SXM 80GB", "gpu", "nvidia",
         (r"a100([- ]sxm4?)?([- ]80gb)?",),
         _f(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312),
         2.039e12, 80e9, "NVIDIA A100 datasheet, SXM 80GB"),
    Chip("NVIDIA GeForce RTX 3090", "gpu", "nvidia",
         (r"(geforce )?rtx 3090",),
         _f(fp32=35.6, tf32=35.6, bf16=71, fp16=71),
         936e9, 24 * GIB,
         "NVIDIA Ampere GA102 whitepaper (FP32-accumulate tensor rates)"),
    # --- AMD Instinct --------------------------------------------------------------------
    Chip("AMD Instinct MI325X", "gpu", "amd",
         (r"(instinct )?mi325x.*",),
         _f(fp64=81.7, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9),
         6.0e12, 256e9, "AMD Instinct MI325X datasheet (dense matrix rates)"),
    Chip("AMD Instinct MI300X", "gpu", "amd",
         (r"(instinct )?mi300x.*",),
         _f(fp64=81.7, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9),
         5.3e12, 192e9, "AMD Instinct MI300X datasheet (dense matrix rates)"),
    # --- CPUs (per socket) ---------------------------------------------------------------
    # Intel Sapphire Rapids: AVX-512 with two FMA ports, 64 fp32 FLOP/cycle/core; AMX-BF16
    # 1024 FLOP/cycle/core. Bandwidth: 8 channels of DDR5-4800.
    Chip("Intel Xeon Platinum 8480+", "cpu", "intel",
         (r"xeon platinum 8480\+?",),
         {"fp64": 56 * 2.0e9 * 32, "fp32": 56 * 2.0e9 * 64, "bf16": 56 * 2.0e9 * 1024},
         307.2e9, None, "56 cores x 2.0 GHz base x per-cycle throughput (Intel optimization "
         "manual); 8 x DDR5-4800"),
    # AMD Zen 4: AVX-512 on two 256-bit FMA pipes, 32 fp32 FLOP/cycle/core; bf16 dot
    # products (VDPBF16PS) double that. Bandwidth: 12 channels of DDR5-4800.
    Chip("AMD EPYC 9654", "cpu", "amd",
         (r"epyc 9654( 96-core processor)?",),
         {"fp64": 96 * 2.4e9 * 16, "fp32": 96 * 2.4e9 * 32, "bf16": 96 * 2.4e9 * 64},
         460.8e9, None, "96 cores x 2.4 GHz base x per-cycle throughput (AMD software "
         "optimization guide for Zen 4); 12 x DDR5-4800"),
    # Zen 3: two 256-bit FMA pipes, 32 fp32 FLOP/cycle/core; 8 channels of DDR4-3200.
    Chip("AMD EPYC 7763", "cpu", "amd",
         (r"epyc 7763( 64-core processor)?",),
         {"fp64": 64 * 2.45e9 * 16, "fp32": 64 * 2.45e9 * 32},
         204.8e9, None, "64 cores x 2.45 GHz base x per-cycle throughput (AMD software "
         "optimization guide for Zen 3); 8 x DDR4-3200"),
)


def normalize(name: str) -> str:
    """Lower-case, vendor prefixes and trademark marks dropped, spaces collapsed."""
    text = name.lower().replace("(r)", " ").replace("(tm)", " ")
    text = re.sub(r"\s+@\s+.*$", "", text)  # "... CPU @ 2.00GHz"
    text = re.sub(r"\b(nvidia|amd|intel)\b", " ", text)
    text = text.replace("_", " ")
    return re.sub(r"\s+", " ", text).strip()


def lookup(name: str) -> Chip | None:
    """The table entry for a device name as drivers report it, or None if not known.

    Names are matched in table order (variants such as NVL, PCIe and GH200 first), each
    pattern against the whole normalized name, so an unlisted variant ("RTX 4090 Laptop
    GPU", "H800") finds nothing instead of the nearest relative.
    """
    key = normalize(name)
    for chip in CHIPS:
        for pattern in chip.patterns:
            if re.fullmatch(pattern, key):
                return chip
    return None


def peak_flops(name: str, precision: str = "bf16") -> float | None:
    """Peak dense FLOP/s of the named device at ``precision``; None if unknown."""
    chip = lookup(name)
    return chip.peak(precision) if chip else None


def memory_bandwidth(name: str) -> float | None:
    """Peak memory bandwidth of the named device in bytes/s; None if unknown."""
    chip = lookup(name)
    return chip.bandwidth if chip else None


def mfu(flops_per_second: float, name: str, precision: str = "bf16",
        devices: int = 1) -> float | None:
    """Model FLOPs utilization as a fraction (0.5 = 50%), or None for an unknown device."""
    peak = peak_flops(name, precision)
    if peak is None or devices < 1:
        return None
    return flops_per_second / (peak * devices)


@dataclass(frozen=True)
class Device:
    """One processor found on this machine."""

    kind: str  # "gpu" or "cpu"
    index: int
    name: str
    memory: float | None = None  # bytes
    cores: int | None = None  # CPUs: logical cores visible to this process
    capability: tuple[int, int] | None = None  # CUDA compute capability when known
    chip: Chip | None = None

    @property
    def known(self) -> bool:
        return self.chip is not None


def _gpus_from_torch() -> list[Device] | None:
    torch: Any = sys.modules.get("torch")  # only if the caller already imported it
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            name = str(props.name)
            cap = (int(props.major), int(props.minor))
            out.append(Device("gpu", i, name, float(props.total_memory), None, cap,
                              lookup(name)))
        return out
    except Exception:  # a broken driver reads as "no GPU", never as a crash
        return None


def _gpus_from_nvidia_smi() -> list[Device]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total,compute_cap",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    return parse_nvidia_smi(proc.stdout)


def parse_nvidia_smi(text: str) -> list[Device]:
    """Devices from ``nvidia-smi --query-gpu=index,name,memory.total,compute_cap`` CSV."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        mem = None
        if len(parts) > 2:
            try:
                mem = float(parts[2]) * 1024**2  # MiB
            except ValueError:
                mem = None
        cap = None
        if len(parts) > 3 and re.fullmatch(r"\d+\.\d+", parts[3]):
            major, minor = parts[3].split(".")
            cap = (int(major), int(minor))
        out.append(Device("gpu", int(parts[0]), parts[1], mem, None, cap, lookup(parts[1])))
    return out


def detect_gpus() -> list[Device]:
    """GPUs visible here: through torch if already imported, else nvidia-smi; [] if none."""
    found = _gpus_from_torch()
    return found if found is not None else _gpus_from_nvidia_smi()


def read_cpuinfo() -> str:
    """The text of /proc/cpuinfo ('' where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def cpu_model(cpuinfo: str | None = None) -> str:
    """This machine's CPU model name ('' if it cannot be read)."""
    if cpuinfo is None:
        cpuinfo = read_cpuinfo()
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")) and ":" in line:
            return line.split(":", 1)[1].strip()
    if sys.platform == "darwin" and shutil.which("sysctl"):
        try:
            proc = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5, check=False)
            return proc.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return ""


def cpu_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``), sorted."""
    if cpuinfo is None:
        cpuinfo = read_cpuinfo()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return tuple(sorted(set(value.split())))
    exe = shutil.which("sysctl")
    if sys.platform == "darwin" and exe is not None:
        try:
            proc = subprocess.run([exe, "-n", "machdep.cpu.features"], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return ()
        text = proc.stdout if proc.returncode == 0 else ""
        return tuple(sorted({f.lower() for f in text.split()}))
    return ()


def detect_cpu() -> Device:
    """This machine's CPU (the table entry is per socket; cores are those visible here)."""
    name = cpu_model()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return Device("cpu", 0, name or "unknown CPU", None, cores, None,
                  lookup(name) if name else None)


def detect() -> list[Device]:
    """All GPUs, then the CPU."""
    return [*detect_gpus(), detect_cpu()]


def describe(device: Device, precision: str = "bf16") -> str:
    """One line for logs: the name, and the peak used, or 'unknown'."""
    if device.chip is None:
        return f"{device.name}: not in the hardware table (peak unknown)"
    peak = device.chip.peak(precision)
    rate = f"{peak / T:.1f} TFLOP/s {precision}" if peak else f"no {precision} figure"
    bw = f", {device.chip.bandwidth / 1e12:.2f} TB/s" if device.chip.bandwidth else ""
    return f"{device.name}: {device.chip.name}, {rate} dense{bw}"


if __name__ == "__main__":
    for dev in detect():
        print(f"{dev.kind}{dev.index}: {describe(dev)}")
