"""The bundled quickstart target: its benchmark, checks, config and queued patches work."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assay.bench.metrics import check_bounds, read_metric
from assay.config.spec import load
from assay.proposers.queue import read_patch_file

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "quickstart"


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    dest = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", ".assay"))
    return dest


def run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, script], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_config_parses() -> None:
    target = load(EXAMPLE)
    assert target.metric.name == "throughput" and target.run.proposer == "sweep"
    assert [g.name for g in target.guards] == ["peak_kb"]
    assert {p.name for p in target.params} == {"CHUNK", "CACHE_SIZE", "COUNTER"}
    assert all(p.apply == "assign" and p.file == "kernel.py" for p in target.params)
    assert target.run.slots == 2 and 12 <= target.run.budget <= 24
    assert target.decision.delta == pytest.approx(0.02)
    assert target.is_editable("kernel.py") and target.is_protected("bench.py")
    assert (EXAMPLE / target.brief).is_file()
    kernel = (EXAMPLE / "kernel.py").read_text()
    for p in target.params:  # the defaults are what the kernel starts with
        m = re.search(rf"^{p.name} = (.*?)(\s+#.*)?$", kernel, re.MULTILINE)
        assert m is not None and ast.literal_eval(m.group(1)) == p.default, p.name
        assert type(p.default) is type(ast.literal_eval(m.group(1)))


def test_bench_prints_metrics_and_checks_pass(copy: Path) -> None:
    target = load(EXAMPLE)
    out = run("bench.py", copy)
    assert out.returncode == 0, out.stderr
    for spec in (target.metric, *target.guards):
        value = read_metric(spec, out.stdout, copy)
        assert value > 0 and check_bounds(spec, value) is None
    checks = run("checks.py", copy)
    assert checks.returncode == 0, checks.stderr


def test_wrong_result_gives_no_metric(copy: Path) -> None:
    kernel = copy / "kernel.py"
    kernel.write_text(kernel.read_text().replace(
        "return w[: -len(suffix)]", "return w[: -len(suffix) - 1]"))
    out = run("bench.py", copy)
    assert out.returncode != 0 and "METRIC" not in out.stdout
    assert "wrong result" in out.stderr
    assert run("checks.py", copy).returncode != 0


def test_queued_patches_apply_and_keep_the_kernel_correct(copy: Path) -> None:
    patches = sorted((EXAMPLE / "patches").glob("*.patch"))
    assert len(patches) == 2
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    for patch in patches:
        hypothesis, diff, _ = read_patch_file(patch)
        assert len(hypothesis) > 20 and diff.startswith("diff --git a/kernel.py")
        applied = subprocess.run(["git", "apply", "-"], cwd=copy, input=diff, text=True,
                                 capture_output=True, check=False)
        assert applied.returncode == 0, applied.stderr
        assert run("checks.py", copy).returncode == 0
        subprocess.run(["git", "apply", "-R", "-"], cwd=copy, input=diff, text=True,
                       check=True)
