"""The gap finder: fusions and ops one implementation has and the other lacks."""

from __future__ import annotations

from pathlib import Path

from research_helpers import write

from assay.research.gaps import collect, find_gaps, normalize, split_words


def test_finds_the_fusion_a_python_competitor_has(fused_pair: tuple[Path, Path]) -> None:
    slow, fast = fused_pair
    report = find_gaps(collect(fast, "fast"), collect(slow, "slow"))
    fusions = [g for g in report.only_a if g.kind == "fusion"]
    assert [g.key for g in fusions] == ["rms_norm+mul"]
    gap = fusions[0]
    # the fused definition is on line 12 of fast/kernels.py
    assert gap.evidence[0].cite == "fast/kernels.py:12"
    assert gap.evidence[0].text.startswith("def rms_norm_mul")
    # the target has both parts, each cited where it is defined
    assert [e.cite for e in gap.parts_present] == ["slow/model.py:4", "slow/model.py:10"]
    assert "runs them separately" in gap.note
    # nothing the slow side has is missing from the fast side
    assert [g for g in report.only_b if g.kind == "fusion"] == []


def test_identical_implementations_have_no_gaps(fused_pair: tuple[Path, Path]) -> None:
    slow, _ = fused_pair
    report = find_gaps(collect(slow, "a"), collect(slow, "b"))
    assert report.only_a == [] and report.only_b == []


CPU = """\
#include "ggml.h"

static void ggml_compute_forward_rms_norm(struct params * p) {
}

static void ggml_compute_forward_mul(struct params * p) {
}

void compute(struct tensor * t) {
    switch (t->op) {
        case GGML_OP_RMS_NORM:
            ggml_compute_forward_rms_norm(p);
            break;
        case GGML_OP_MUL:
            ggml_compute_forward_mul(p);
            break;
    }
}
"""

CUDA = """\
#include "common.cuh"

static void ggml_cuda_op_rms_norm(ctx * c) {
}

static void ggml_cuda_op_mul(ctx * c) {
}

static void ggml_cuda_op_soft_max(ctx * c) {
}

static void evaluate(graph * g, int i) {
    // try to fuse the norm with the weight multiply
    if (ggml_cuda_can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) {
        i++;
    }
    for (ggml_op op : { GGML_OP_MUL, GGML_OP_SOFT_MAX }) {
        use(op);
    }
    switch (g->nodes[i]->op) {
        case GGML_OP_RMS_NORM: ggml_cuda_op_rms_norm(c); break;
        case GGML_OP_MUL: ggml_cuda_op_mul(c); break;
        case GGML_OP_SOFT_MAX: ggml_cuda_op_soft_max(c); break;
    }
}
"""

SUPPORTED = """\
static const int supported[] = { GGML_OP_RMS_NORM, GGML_OP_MUL };
"""


def test_backends_fusion_and_missing_op_with_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "ggml-cpu" / "ggml-cpu.c", CPU)
    write(tmp_path / "ggml-cuda" / "ggml-cuda.cu", CUDA)
    cuda = collect(tmp_path / "ggml-cuda", "ggml-cuda")
    cpu = collect(tmp_path / "ggml-cpu", "ggml-cpu")
    report = find_gaps(cuda, cpu)
    by_key = {(g.kind, g.key): g for g in report.only_a}
    fusion = by_key[("fusion", "rms_norm+mul")]
    assert fusion.evidence[0].cite == "ggml-cuda/ggml-cuda.cu:14"
    assert {e.cite for e in fusion.parts_present} == {"ggml-cpu/ggml-cpu.c:11",
                                                      "ggml-cpu/ggml-cpu.c:14"}
    # the range-for list is a loop, not a fusion
    assert ("fusion", "mul+soft_max") not in by_key
    op = by_key[("op", "soft_max")]
    # the `case` line is the evidence shown first, then the other mentions
    assert [e.cite for e in op.evidence] == ["ggml-cuda/ggml-cuda.cu:23",
                                             "ggml-cuda/ggml-cuda.cu:17"]
    # kernels named differently per backend normalize to the same op: no kernel gap
    assert ("kernel", "rms_norm") not in by_key
    assert ("kernel", "soft_max") in by_key or ("op", "soft_max") in by_key
    assert report.common["op"] == 2


def test_op_list_without_fusing_nearby_is_not_a_fusion(tmp_path: Path) -> None:
    write(tmp_path / "a" / "x.c", SUPPORTED)
    write(tmp_path / "b" / "y.c", "int nothing;\n")
    report = find_gaps(collect(tmp_path / "a", "a"), collect(tmp_path / "b", "b"))
    assert not [g for g in report.only_a if g.kind == "fusion"]
    assert {g.key for g in report.only_a if g.kind == "op"} == {"rms_norm", "mul"}


def test_extension_of_an_existing_fusion_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "a" / "a.cu", """\
        // fuse
        bool f = can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL, GGML_OP_ROPE });
        """)
    write(tmp_path / "b" / "b.c", """\
        // fuse
        bool f = can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL });
        int r = GGML_OP_ROPE;
        """)
    report = find_gaps(collect(tmp_path / "a", "a"), collect(tmp_path / "b", "b"))
    gap = next(g for g in report.only_a if g.kind == "fusion")
    assert gap.key == "rms_norm+mul+rope"
    assert gap.extends == "rms_norm+mul"
    assert "extends b's fusion rms_norm + mul" in gap.note


def test_custom_op_prefix_and_fused_word(tmp_path: Path) -> None:
    write(tmp_path / "a" / "a.c", """\
        void fused_layer_norm_gelu(float * x) {
        }
        int k = MYLIB_LAYER_NORM;
        """)
    write(tmp_path / "b" / "b.c", """\
        int k = MYLIB_LAYER_NORM + MYLIB_GELU;
        """)
    a = collect(tmp_path / "a", "a", op_prefixes=["MYLIB_"])
    b = collect(tmp_path / "b", "b", op_prefixes=["MYLIB_"])
    report = find_gaps(a, b)
    gap = next(g for g in report.only_a if g.kind == "fusion")
    assert gap.key == "layer_norm+gelu"
    assert gap.evidence[0].cite == "a/a.c:1"


def test_name_normalization() -> None:
    assert split_words("CONV_2D") == ["conv2d"]
    assert split_words("RmsNormKernel") == ["rms", "norm", "kernel"]
    assert normalize("ggml_cuda_op_rms_norm_f32") == ("rms", "norm")
    assert normalize("kernel_rms_norm_mul_f32") == ("rms", "norm", "mul")
    assert normalize("ggml_compute_forward_rms_norm") == ("rms", "norm")


def test_helper_macros_are_not_ops_and_splits_prefer_enum_ops(tmp_path: Path) -> None:
    write(tmp_path / "a" / "ops.c", """\
        void f(int op) {
            GGML_TENSOR_BINARY_OP_LOCALS
            switch (op) {
                case GGML_OP_NORM: case GGML_OP_MUL: case GGML_OP_ADD: case GGML_OP_SCALE:
                    break;
            }
        }
        """)
    write(tmp_path / "b" / "kernels.metal", """\
        kernel void norm_mul(device float * x) {
        }
        // the fused variant
        kernel void kernel_norm_mul_add_f32(device float * x) {
        }
        int k = GGML_OP_NORM + GGML_OP_MUL + GGML_OP_ADD + GGML_OP_SCALE;
        """)
    a, b = collect(tmp_path / "a", "a"), collect(tmp_path / "b", "b")
    report = find_gaps(b, a)
    assert "locals" not in a.keys("op")
    assert a.keys("op") == {"norm", "mul", "add", "scale"}
    fusion = next(g for g in report.only_a if g.kind == "fusion")
    assert fusion.key == "norm+mul+add"  # not norm_mul + add
    assert fusion.evidence[0].cite == "b/kernels.metal:4"
