"""The machine and software a result was measured on.

A :class:`Fingerprint` is taken at the start of every session and stored in the journal
(meta key ``fingerprints``, one entry per session), so a number can always be traced to
the CPU, GPU, driver, compilers and packages that produced it, and two runs can be told
apart when their machines differ. ``assay show`` prints the one an experiment ran under;
every pull-request text of ``assay finalize`` carries it.

What is read, and where from (anything missing is left empty, never guessed):

- CPU: model name and feature flags from ``/proc/cpuinfo`` (``sysctl`` on macOS), the
  logical cores this process may use;
- GPU: names through :mod:`assay.hardware`, driver and CUDA versions from ``nvidia-smi``,
  the CUDA toolkit from ``nvcc``;
- compilers: the first line of ``--version`` of ``cc``, ``gcc``, ``clang``, ``nvcc``;
- Python and the versions of the installed packages named in :data:`PACKAGES`;
- the target's commit and the SHA-256 of its config file.

``extra`` holds whatever a subsystem adds (cuDNN, torch's CUDA, a corpus hash); callers pass
it to :func:`take`.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hardware
from ..records import Fingerprint

if TYPE_CHECKING:
    from ..journal.store import Journal

PACKAGES = ("assay", "numpy", "scipy", "torch", "triton", "jax", "numba", "cython", "pybind11",
            "cmake", "ninja", "ray", "optuna")
COMPILERS = ("cc", "gcc", "clang", "nvcc")
_TIMEOUT_S = 10.0


def _output(args: Sequence[str]) -> str:
    exe = shutil.which(args[0])
    if exe is None:
        return ""
    try:
        proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True,
                              timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def parse_driver_banner(text: str) -> tuple[str, str]:
    """(driver version, CUDA version) from ``nvidia-smi``'s banner."""
    driver = re.search(r"Driver Version:\s*([\w.\-]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\w.\-]+)", text)
    return (driver.group(1) if driver else "", cuda.group(1) if cuda else "")


def parse_nvcc(text: str) -> str:
    m = re.search(r"release\s+([\d.]+)", text)
    return m.group(1) if m else ""


def compiler_versions(names: Sequence[str] = COMPILERS) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in names:
        text = _output([name, "--version"])
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if not lines:
            continue
        out[name] = (next((ln for ln in lines if "release" in ln), lines[-1])
                     if name == "nvcc" else lines[0])
    return out


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def config_hash(path: Path | None) -> str:
    if path is None or not path.is_file():
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def take(commit: str = "", config_path: Path | None = None,
         extra: Mapping[str, str] | None = None) -> Fingerprint:
    """The fingerprint of this machine now, for a target at ``commit``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    gpus = tuple(d.name for d in hardware.detect_gpus())
    driver = cuda = toolkit = ""
    if gpus:
        driver, cuda = parse_driver_banner(_output(["nvidia-smi"]))
    compilers = compiler_versions()
    if "nvcc" in compilers:
        toolkit = parse_nvcc(compilers["nvcc"])
    return Fingerprint(
        cpu=hardware.cpu_model() or "unknown CPU", cpu_flags=hardware.cpu_flags(), cores=cores,
        gpus=gpus, driver=driver, cuda=cuda, cuda_toolkit=toolkit, compilers=compilers,
        python=platform.python_version(), os=f"{platform.system()} {platform.release()}",
        packages=package_versions(), commit=commit, config_hash=config_hash(config_path),
        extra=dict(extra or {}), taken_at=time.time())


def record(journal: Journal, session: str, fp: Fingerprint) -> None:
    """Store ``fp`` as the fingerprint of ``session`` (one entry per session)."""
    stored = [(s, f) for s, f in journal.fingerprints() if s != session]
    journal.set_fingerprints([*stored, (session, fp)])


def recorded(journal: Journal) -> list[tuple[str, Fingerprint]]:
    """Every stored (session, fingerprint), oldest first."""
    return sorted(journal.fingerprints(), key=lambda sf: sf[1].taken_at)


def at(journal: Journal, when: float | None = None) -> Fingerprint | None:
    """The fingerprint of the session running at ``when`` (the latest if None)."""
    found = recorded(journal)
    if not found:
        return None
    if when is None:
        return found[-1][1]
    before = [fp for _, fp in found if fp.taken_at <= when]
    return before[-1] if before else found[0][1]


def extra_from_command(cmd: str, cwd: Path, env: Mapping[str, str],
                       timeout_s: float = 120.0) -> dict[str, str]:
    """The ``key: value`` lines a target's ``[env] fingerprint`` command prints (what only
    the target's own interpreter knows: cuDNN, the framework's CUDA, a corpus hash). A
    command that fails or times out gives ``fingerprint_error`` instead of values."""
    try:
        proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=dict(env), capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"fingerprint_error": f"{cmd!r}: {exc}"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"fingerprint_error": f"{cmd!r} exited {proc.returncode}: {tail[0][:200]}"}
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep and re.fullmatch(r"[A-Za-z_][\w.-]*", key.strip()):
            out[key.strip()] = value.strip()
    return out
