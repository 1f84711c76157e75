"""Ranking hypotheses and writing the brief."""

from __future__ import annotations

from pathlib import Path

from research_helpers import write

from assay.research.brief import Findings, rank, render
from assay.research.gaps import collect, find_gaps
from assay.research.profile import HotSpot, ProfileResult
from assay.research.roofline import place, roof, workload

FUSING = """\
// fuse the norm with its weight
bool ok = can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL });
bool ok2 = can_fuse(g, i, { GGML_OP_SCALE, GGML_OP_ADD });
"""
ONLY_NORM = """\
// fuse a scale into the add
bool ok = can_fuse(g, i, { GGML_OP_SCALE, GGML_OP_ADD });
"""
CPU = """\
void f(int op) {
    switch (op) {
        case GGML_OP_RMS_NORM: break;
        case GGML_OP_MUL: break;
        case GGML_OP_SCALE: break;
        case GGML_OP_ADD: break;
    }
}
"""


def _evidence(tmp_path: Path, hot: list[HotSpot]) -> Findings:
    write(tmp_path / "cuda" / "a.cu", FUSING)
    write(tmp_path / "vulkan" / "b.cpp", FUSING)
    write(tmp_path / "metal" / "c.m", ONLY_NORM)
    write(tmp_path / "cpu" / "ops.c", CPU)
    reports = [("backend", find_gaps(collect(tmp_path / name, name),
                                   collect(tmp_path / "cpu", "cpu")))
               for name in ("cuda", "vulkan", "metal")]
    prof = ProfileResult("py-spy", "python bench.py", hotspots=hot, samples=100)
    r = roof("x", "fp32", 1e12, 1e11)
    w = workload(1e9, 1e9, "")
    return Findings("t", "tok_s", profile=prof, roof=r, workload=w, placement=place(w, r),
                    gaps=reports, editable=("cpu/**",))


def test_consensus_across_backends_ranks_first_and_cites_each(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, [])
    hyps = rank(ev)
    fusions = [h for h in hyps if h.text.startswith("Fuse")]
    # all three backends fuse SCALE+ADD, two fuse RMS_NORM+MUL; the cpu fuses neither
    keys = [h.text.split(" in ")[0] for h in fusions]
    assert keys[0] == "Fuse SCALE → ADD"  # three backends agree
    assert keys[1] == "Fuse RMS_NORM → MUL"  # two backends
    top, second = fusions[0], fusions[1]
    assert {"cuda/a.cu:3", "vulkan/b.cpp:3", "metal/c.m:2"} <= set(top.sources)
    assert {"cuda/a.cu:2", "vulkan/b.cpp:2"} <= set(second.sources)
    assert "cpu/ops.c:3" in second.sources  # where the cpu runs RMS_NORM alone
    assert top.score > second.score
    assert "memory-bound" in top.text
    assert all(h.source_kind == "backend" for h in fusions)


def test_hot_parts_raise_a_fusion_and_only_editable_code_is_a_target(tmp_path: Path) -> None:
    hot = [HotSpot("bench_loop", "bench.py", 3, 0.6, in_target=True),
           HotSpot("ggml_compute_forward_rms_norm_f32", "cpu/ops.c", 10, 0.3)]
    ev = _evidence(tmp_path, hot)
    hyps = rank(ev)
    # the hot spot itself first, then the fusion whose part is hot, above the fusion of
    # cold ops that more backends ship; MUL is not in the profile, so half the share
    assert hyps[0].text.startswith("Speed up RMS_NORM")
    assert hyps[1].text.startswith("Fuse RMS_NORM → MUL")
    assert "30% of samples" in hyps[1].text and hyps[1].share == 0.15
    assert "its other ops (mul) do not appear in the profile" in hyps[1].why
    cold = next(h for h in hyps if h.text.startswith("Fuse SCALE → ADD"))
    assert hyps[1].score > cold.score
    profile = [h for h in hyps if h.source_kind == "profile"]
    # the benchmark itself is not editable: no hypothesis to speed it up
    assert [h.sources for h in profile] == [
        ("profile:cpu/ops.c::ggml_compute_forward_rms_norm_f32",)]
    text = render(ev, hyps)
    assert "| `bench_loop` | `bench.py:3` | 60.0%" in text
    assert "## Gaps between implementations" in text
    assert "### cuda (backend) vs cpu" in text


def test_every_kind_keeps_a_place(tmp_path: Path) -> None:
    hot = [HotSpot("rms_norm", "cpu/ops.c", 10, 0.04)]
    ev = _evidence(tmp_path, hot)
    hyps = rank(ev, top=2)
    assert len(hyps) == 2
    assert {h.source_kind for h in hyps} == {"backend"}  # a 4% hot spot gives none
    ev.profile.hotspots[0] = HotSpot("rms_norm", "cpu/ops.c", 10, 0.2)  # type: ignore[union-attr]
    hyps = rank(ev, top=2)
    assert {h.source_kind for h in hyps} == {"backend", "profile"}
