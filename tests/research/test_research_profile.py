"""Profiling a real benchmark: the planted hot function must be named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from research_helpers import PLANTED, write

from assay.research import profile as prof_mod
from assay.research.profile import aggregate, is_python_command, profile_command


def _prog(tmp_path: Path) -> Path:
    return write(tmp_path / "prog.py", PLANTED)


def test_py_spy_names_the_planted_hot_function(tmp_path: Path) -> None:
    if prof_mod._py_spy() is None:
        pytest.skip("py-spy is not installed")
    _prog(tmp_path)
    res = profile_command(f"{sys.executable} prog.py", tmp_path, timeout_s=60)
    if res.profiler != "py-spy":  # ptrace refused here: the fallback must say so
        assert any("falling back" in n for n in res.notes)
    assert res.hotspots, res.notes
    top = res.hotspots[0]
    assert top.function == "planted_hot"
    assert top.file == "prog.py"
    assert top.share > 0.5
    assert top.in_target
    assert "METRIC throughput=" in res.stdout
    assert any("py-spy" in n for n in res.notes)


def test_cprofile_names_it_too(tmp_path: Path) -> None:
    _prog(tmp_path)
    res = profile_command(f"{sys.executable} prog.py", tmp_path, timeout_s=60,
                          prefer="cProfile")
    assert res.profiler == "cProfile"
    assert res.hotspots[0].function == "planted_hot"
    assert res.hotspots[0].file == "prog.py"
    assert res.hotspots[0].line == 4  # the def line, as cProfile reports it
    # the rest is mostly time.sleep in cold(); planted_hot still leads by far
    assert res.hotspots[0].share > 2 * res.hotspots[1].share


def test_falls_back_to_cprofile_when_py_spy_cannot_attach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write(tmp_path / "bin" / "py-spy", """\
        #!/bin/sh
        echo "Error: Permission Denied: Failed to attach (ptrace not permitted)" >&2
        exit 1
        """)
    fake.chmod(0o755)
    monkeypatch.setattr(prof_mod, "_py_spy", lambda: str(fake))
    _prog(tmp_path)
    res = profile_command(f"{sys.executable} prog.py", tmp_path, timeout_s=60)
    assert res.profiler == "cProfile"
    assert any("ptrace" in n and "falling back" in n for n in res.notes), res.notes
    assert res.hotspots[0].function == "planted_hot"


def test_missing_py_spy_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prof_mod, "_py_spy", lambda: None)
    _prog(tmp_path)
    res = profile_command(f"{sys.executable} prog.py", tmp_path, timeout_s=60)
    assert res.profiler == "cProfile"
    assert any("not installed" in n for n in res.notes)


def test_unprofilable_command_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prof_mod, "_py_spy", lambda: None)
    res = profile_command("true", tmp_path, timeout_s=30, prefer="cProfile")
    assert not res.ok
    assert any("unknown" in n for n in res.notes)


@pytest.mark.skipif(shutil.which("perf") is None or shutil.which("cc") is None,
                    reason="perf or a C compiler is missing")
def test_perf_names_a_native_hot_function(tmp_path: Path) -> None:
    write(tmp_path / "hot.c", """\
        #include <stdio.h>
        __attribute__((noinline)) double planted_hot_c(long n) {
            double s = 0; for (long i = 0; i < n; i++) s += (double)i * 0.5 / (i + 1);
            return s;
        }
        int main(void) { double t = 0; for (int k = 0; k < 40; k++) t += planted_hot_c(4000000);
            printf("%f\\n", t); return 0; }
        """)
    subprocess.run(["cc", "-O1", "-o", "hot", "hot.c"], cwd=tmp_path, check=True)
    res = profile_command("./hot", tmp_path, timeout_s=120)
    if not res.ok:
        pytest.skip(f"perf cannot record here: {res.notes}")
    assert res.profiler == "perf"
    assert res.hotspots[0].function == "planted_hot_c"
    assert any("perf" in n for n in res.notes)


@pytest.mark.slow
def test_torch_profiler_names_operators(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    write(tmp_path / "t.py", """\
        import torch
        a = torch.randn(256, 256)
        for _ in range(20):
            a = torch.tanh(a @ a.T / 256)
        print("METRIC x=1")
        """)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    res = profile_command(f"{sys.executable} t.py", tmp_path, env=env, timeout_s=180,
                          torch=True, prefer="cProfile")
    names = [o.function for o in res.operators]
    assert any(n in ("aten::mm", "aten::matmul", "aten::tanh", "aten::addmm")
               for n in names[:5]), (names, res.notes)


def test_python_command_detection() -> None:
    assert is_python_command("python bench.py")
    assert is_python_command("FOO=1 uv run python -m bench")
    assert is_python_command(".venv/bin/python3.11 x.py --n 3")
    assert is_python_command("./bench.py")
    assert not is_python_command("make bench")
    assert not is_python_command("./build/bin/llama-bench -m model.gguf")


def test_samples_count_for_the_deepest_frame_in_the_target(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("")
    lib = "/usr/lib/python3/numpy/core.py"
    stacks = Counter({
        ("<module> (app.py:30)", "work (app.py:10)", f"dot ({lib}:5)"): 70,
        ("<module> (app.py:30)", "other (app.py:20)"): 30,
    })
    res = aggregate(stacks, tmp_path)
    top = res.hotspots[0]
    assert (top.function, top.file, top.line) == ("work", "app.py", 10)
    assert top.share == pytest.approx(0.7)
    assert top.self_share == 0.0  # the leaf was library code
    assert res.hotspots[1].function == "other"


def test_native_symbols_point_at_their_definition(tmp_path: Path) -> None:
    import platform

    from assay.research.focus import locate_symbols as _locate_symbols
    from assay.research.gaps import collect
    from assay.research.profile import HotSpot, ProfileResult

    arch = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm", "arm64": "arm"}.get(
        platform.machine().lower())
    if arch is None:
        pytest.skip("no arch tag for this machine")
    other = "arm" if arch == "x86" else "x86"
    write(tmp_path / "src" / "arch" / other / "quants.c",
          "void vec_dot_q4(int n) {\n}\n")
    write(tmp_path / "src" / "arch" / arch / "quants.c",
          "\n\nvoid vec_dot_q4(int n) {\n}\n")
    write(tmp_path / "src" / "ops.c", "static void rms_norm_f32(int n) {\n}\n")
    # a template's instances: perf names them with their arguments
    write(tmp_path / "src" / "repack.cpp", "template <typename block_tx8>\n"
          "static void gemv_lut(int n, const void * vx) {\n}\n")
    focus = collect(tmp_path, "", cite_prefix="")
    prof = ProfileResult("perf", "./bench", hotspots=[
        HotSpot("vec_dot_q4", "libx.so", None, 0.5),
        HotSpot("rms_norm_f32.constprop.0", "libx.so", None, 0.2),
        HotSpot("gemv_lut<block<4, 8> >", "llama-bench", None, 0.15, in_target=False),
        HotSpot("memcpy", "libc.so.6", None, 0.1, in_target=False)])
    _locate_symbols(prof, focus)
    assert [(h.file, h.line, h.in_target) for h in prof.hotspots] == [
        (f"src/arch/{arch}/quants.c", 3, True), ("src/ops.c", 1, True),
        ("src/repack.cpp", 2, True), ("libc.so.6", None, False)]


def test_template_arguments_are_cut_from_native_symbols() -> None:
    from assay.research.focus import without_templates

    assert without_templates("gemm_lut<block_iq4_nlx8>") == "gemm_lut"
    assert without_templates("void ns::f<a<b>, c>(int)") == "void ns::f(int)"
    assert without_templates("operator<") == "operator<"
    assert without_templates("a < b") == "a < b"


def test_a_benchmark_past_its_time_is_ended_with_its_children(tmp_path: Path) -> None:
    write(tmp_path / "slow.py", """\
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open("child.pid", "w").write(str(child.pid))
        time.sleep(60)
        """)
    start = time.monotonic()
    res = profile_command(f"{sys.executable} slow.py", tmp_path, timeout_s=3,
                          prefer="cProfile")
    assert time.monotonic() - start < 30
    assert res.exit_code is None
    assert any("timed out" in n for n in res.notes)
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # a killed child stays a zombie until its parent is reaped; check its state
        try:  # it can exit between the kill(0) and this read
            zombie = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
        except OSError:
            break
        if zombie:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the benchmark's child outlived the timeout")
