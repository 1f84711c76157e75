"""Fixtures for the research tests: tiny targets, implementations and local servers."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from research_helpers import Server, git, write


@pytest.fixture
def http_server() -> Iterator[Callable[[list[tuple[int, dict[str, str], str]]], Server]]:
    servers: list[Server] = []

    def make(script: list[tuple[int, dict[str, str], str]]) -> Server:
        s = Server(script)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def fused_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two tiny implementations: ``fast`` fuses rms_norm and mul, ``slow`` does not."""
    slow = tmp_path / "slow"
    fast = tmp_path / "fast"
    write(slow / "model.py", """\
        import math


        def rms_norm(x):
            s = sum(v * v for v in x)
            r = 1.0 / math.sqrt(s / len(x) + 1e-6)
            return [v * r for v in x]


        def mul(x, w):
            return [a * b for a, b in zip(x, w)]


        def forward(x, w):
            return mul(rms_norm(x), w)
        """)
    write(fast / "kernels.py", """\
        import math


        def mul(x, w):
            return [a * b for a, b in zip(x, w)]


        def rms_norm(x):
            return rms_norm_mul(x, [1.0] * len(x))


        def rms_norm_mul(x, w):
            s = sum(v * v for v in x)
            r = 1.0 / math.sqrt(s / len(x) + 1e-6)
            return [v * r * c for v, c in zip(x, w)]
        """)
    return slow, fast


@pytest.fixture
def target_repo(tmp_path: Path, fused_pair: tuple[Path, Path]) -> Path:
    """A target whose benchmark runs the unfused model, with docs and a faster fork."""
    slow, fast = fused_pair
    root = tmp_path / "target"
    write(root / "src" / "model.py", (slow / "model.py").read_text())
    write(root / "bench.py", """\
        import sys
        import time
        sys.path.insert(0, "src")
        from model import forward

        x = [0.5] * 4000
        w = [1.5] * 4000
        t = time.perf_counter()
        n = 0
        while time.perf_counter() - t < 1.0:
            forward(x, w)
            n += 1
        print(f"METRIC throughput={n / (time.perf_counter() - t):.3f}")
        """)
    write(root / "docs" / "notes.md", """\
        # Notes on speed

        Nothing here is about speed yet.

        The forward pass runs the RMS norm and then an elementwise multiply. Both
        read and write the activation vector; a fused rms_norm_mul would save a
        round trip through memory.
        """)
    write(root / "assay.toml", f"""\
        [metric]
        name = "throughput"
        direction = "maximize"

        [commands]
        bench = "{sys.executable} bench.py"

        [scope]
        editable = ["src/**/*.py"]

        [research]
        sources = ["docs/"]
        repos = ["{fast}"]
        flops = 24000.0
        bytes = 128000.0
        peak_flops = 1.0e11
        bandwidth = 2.0e10
        """)
    git(root, "init", "-q", ".")
    return root
