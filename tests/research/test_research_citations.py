"""Citations are repository-relative everywhere, and plumbing kernels are no gaps."""

from __future__ import annotations

import sys
from pathlib import Path

from research_helpers import git, write

from assay.config.spec import load
from assay.research import run_research
from assay.research.gaps import collect, find_gaps

CPU = """\
void compute(int op) {
    switch (op) {
        case GGML_OP_RMS_NORM: case GGML_OP_MUL: case GGML_OP_ADD: case GGML_OP_CONT:
        case GGML_OP_UNARY: break;
    }
}
"""
GPU = """\
static void convert_unary_cont(float * x) {
}

static void evaluate(graph * g, int i) {
    if (ggml_cuda_can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) {
        return;
    }
    switch (g->op) {
        case GGML_OP_RMS_NORM: case GGML_OP_MUL: case GGML_OP_ADD: case GGML_OP_CONT:
        case GGML_OP_UNARY: break;
    }
}
"""


def test_a_plumbing_kernel_of_ops_the_target_has_is_no_gap(tmp_path: Path) -> None:
    write(tmp_path / "cpu" / "ops.c", CPU)
    write(tmp_path / "gpu" / "convert.cu", GPU)
    report = find_gaps(collect(tmp_path / "gpu", "gpu"), collect(tmp_path / "cpu", "cpu"))
    assert not [g for g in report.only_a if g.kind == "kernel"]
    assert [g.key for g in report.only_a if g.kind == "fusion"] == ["rms_norm+mul"]


def test_backends_inside_the_target_are_cited_from_its_root(tmp_path: Path) -> None:
    root = tmp_path / "lib"
    write(root / "src" / "ggml-cpu" / "ops.c", CPU)
    write(root / "src" / "ggml-cuda" / "fuse.cu", GPU)
    write(root / "assay.toml", f"""\
        [metric]
        name = "us"
        direction = "minimize"

        [commands]
        bench = "{sys.executable} -c 'print(1)'"

        [scope]
        editable = ["src/ggml-cpu/**"]

        [research]
        focus = ["src/ggml-cpu"]
        backends = ["src/ggml-cuda"]
        peak_flops = 1.0e11
        bandwidth = 1.0e10
        """)
    git(root, "init", "-q", ".")
    result = run_research(load(root), None, offline=True, profile=False)
    fusion = next(h for h in result.hypotheses if h.text.startswith("Fuse RMS_NORM"))
    # the backend's file, from the repository's root (not "ggml-cuda/fuse.cu:5")
    assert fusion.sources[0] == "src/ggml-cuda/fuse.cu:5"
    assert "src/ggml-cpu/ops.c:3" in fusion.sources
    assert "`src/ggml-cuda/fuse.cu:5`" in result.brief
