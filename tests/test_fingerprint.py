"""The environment fingerprint: parsed from real tool output, stored per session, shown."""

from __future__ import annotations

import hashlib
import platform

from typer.testing import CliRunner

from assay import api, hardware
from assay.bench import fingerprint
from assay.cli.app import app
from assay.journal.store import Journal

from .conftest import TinyFactory, patch_work

SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
"""
NVCC = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Cuda compilation tools, release 13.0, V13.0.88
"""
CPUINFO_X86 = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 sse4_2 avx\n"
CPUINFO_ARM = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n"


def test_parsers_read_real_tool_output() -> None:
    assert fingerprint.parse_driver_banner(SMI) == ("580.95.05", "13.0")
    assert fingerprint.parse_driver_banner("no gpu here") == ("", "")
    assert fingerprint.parse_nvcc(NVCC) == "13.0"
    assert hardware.cpu_flags(CPUINFO_X86) == ("avx", "avx2", "fpu", "sse4_2")
    assert hardware.cpu_flags(CPUINFO_ARM) == ("asimd", "fp", "sve")


def test_take_describes_this_machine(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "assay.toml"
    cfg.write_text("[metric]\nname = 'x'\n")
    fp = fingerprint.take("abc123", cfg, extra={"corpus": "sha256:00"})
    assert fp.python == platform.python_version()
    assert fp.config_hash == hashlib.sha256(cfg.read_bytes()).hexdigest()
    assert fp.commit == "abc123" and fp.cores >= 1 and fp.cpu
    assert fp.packages.get("assay")  # the package itself is always listed
    again = fingerprint.Fingerprint.from_dict(fp.as_dict())
    assert again == fp
    text = "\n".join(fp.lines())
    assert "commit abc123" in text and "corpus sha256:00" in text and fp.python in text


def test_every_session_stores_one_and_show_prints_it(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=200_000, budget=1, pairs=2,
                       extra='[proposer.queue]\npath = "patches"\n')
    (root / "patches").mkdir()
    (root / "patches" / "1.patch").write_text("# hypothesis: less work\n"
                                              + patch_work(root, 20_000))
    api.run(root, proposer="queue")
    api.run(root, proposer="queue", budget=1)  # a second session, resumed
    j = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        stored = fingerprint.recorded(j)
    finally:
        j.close()
    assert len(stored) == 2 and stored[0][0] != stored[1][0]
    head = api.load(root)
    assert stored[0][1].config_hash == hashlib.sha256(head.config_path.read_bytes()).hexdigest()
    shown = api.show("e0001", root)
    assert shown["fingerprint"]["python"] == platform.python_version()
    out = CliRunner().invoke(app, ["show", "e0001", "-C", str(root)])
    assert out.exit_code == 0, out.output
    assert "measured on:" in out.output and f"Python {platform.python_version()}" in out.output
