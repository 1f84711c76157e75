"""Cleaner gaps: whole lists, one key per fusion, no environment variables or plumbing."""

from __future__ import annotations

from pathlib import Path

from research_helpers import write

from assay.research.gaps import collect, find_gaps, fusion_parts

CPU = """\
void compute(struct tensor * t) {
    switch (t->op) {
        case GGML_OP_RMS_NORM: break;
        case GGML_OP_NORM: break;
        case GGML_OP_MUL: break;
        case GGML_OP_ADD: break;
        case GGML_OP_ROPE: break;
        case GGML_OP_SOFT_MAX: break;
        case GGML_OP_UNARY: break;
        case GGML_OP_SQR: break;
    }
    switch (ggml_get_unary_op(t)) {
        case GGML_UNARY_OP_RELU: break;
        case GGML_UNARY_OP_SILU: break;
        case GGML_UNARY_OP_GELU: break;
        case GGML_UNARY_OP_TANH: break;
    }
}

static void ggml_compute_forward_rope_f32(void) {
}
"""

GPU = """\
#define GGML_OP_HELPER_MAX 4
static void rope_norm(float * x) {
}

static void relu_sqr_fused(float * x) {
}

static bool try_fuse(graph * g, int i) {
    const int min_batch = getenv("GGML_OP_OFFLOAD_MIN_BATCH") ? 1 : 32;
    // a long comment about why this fusion matters,
    // spread over
    // many
    // lines
    // so that
    // the call below
    // starts far away
    if (ggml_cuda_can_fuse(g, i,
                           { GGML_OP_RMS_NORM,
                             GGML_OP_MUL,
                             GGML_OP_ADD },
                           {})) {
        return true;
    }
    if (can_fuse(g, i, { GGML_OP_UNARY, GGML_OP_SQR }, { GGML_UNARY_OP_RELU })) {
        return true;
    }
    switch (g->op) {
        case GGML_OP_RMS_NORM: case GGML_OP_MUL: case GGML_OP_ADD: case GGML_OP_ROPE:
        case GGML_OP_SOFT_MAX: case GGML_OP_UNARY: case GGML_OP_SQR: case GGML_OP_NORM:
            break;
    }
    return false;
}

static bool later(graph * g, int i) {
    return ggml_can_fuse_subgraph(g, i, topk, { i + 3 });
}
"""


TYPES = """\
// the lists live in a header; the call that fuses them is in another file
static constexpr std::initializer_list<ggml_op> topk{ GGML_OP_SOFT_MAX, GGML_OP_RESHAPE,
    GGML_OP_ARGSORT, GGML_OP_VIEW, GGML_OP_GET_ROWS };
static constexpr std::initializer_list<ggml_op> plain{ GGML_OP_ADD, GGML_OP_MUL };
"""


def _report(tmp_path: Path):  # type: ignore[no-untyped-def]
    write(tmp_path / "cpu" / "ops.c", CPU)
    write(tmp_path / "gpu" / "fuse.cu", GPU)
    write(tmp_path / "gpu" / "types.h", TYPES)
    return find_gaps(collect(tmp_path / "gpu", "gpu"), collect(tmp_path / "cpu", "cpu"))


def test_environment_variables_and_macros_are_not_ops(tmp_path: Path) -> None:
    report = _report(tmp_path)
    ops = report.a.keys("op")
    assert "offload_min_batch" not in ops  # getenv("GGML_OP_OFFLOAD_MIN_BATCH")
    assert "helper_max" not in ops  # #define GGML_OP_HELPER_MAX
    assert {"rms_norm", "mul", "add", "soft_max"} <= ops


def test_a_list_far_from_its_fuse_word_is_read_whole(tmp_path: Path) -> None:
    by_key = {g.key: g for g in _report(tmp_path).only_a if g.kind == "fusion"}
    # the call opens eight lines below the comment and its list spans three lines
    assert "rms_norm+mul+add" in by_key
    assert by_key["rms_norm+mul+add"].evidence[0].cite == "gpu/fuse.cu:18"
    # a named list passed to a fuse call in another file counts, its view-only steps
    # dropped; a named list no fuse call takes is no fusion
    assert by_key["soft_max+argsort+get_rows"].evidence[0].cite == "gpu/types.h:2"
    assert "add+mul" not in by_key


def test_one_fusion_under_two_spellings_is_one_key(tmp_path: Path) -> None:
    fusions = [g for g in _report(tmp_path).only_a if g.kind == "fusion"]
    relu = [g for g in fusions if "sqr" in g.key]
    # UNARY + SQR with the kind RELU, and a function relu_sqr_fused: one fusion
    assert [g.key for g in relu] == ["relu+sqr"]
    assert {e.cite for e in relu[0].evidence} == {"gpu/fuse.cu:5", "gpu/fuse.cu:24"}


def test_a_variant_of_an_op_the_target_has_is_no_kernel_gap(tmp_path: Path) -> None:
    kernels = {g.key for g in _report(tmp_path).only_a if g.kind == "kernel"}
    assert "rope_norm" not in kernels  # ROPE in its norm mode: the cpu has ROPE


def test_fusion_parts_normalize_spellings() -> None:
    assert fusion_parts(["unary", "mul"], ["silu"]) == ("silu", "mul")
    assert fusion_parts(["mul", "view", "view", "add", "add"]) == ("mul", "add")
    assert fusion_parts(["add", "add", "add"]) == ("add", "add")
    assert fusion_parts(["soft_max", "reshape", "argsort"]) == ("soft_max", "argsort")
