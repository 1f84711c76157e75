"""Ranking by what the benchmark spends, hypotheses as a set, and re-ranking after a wave."""

from __future__ import annotations

import json
import time
from pathlib import Path

from research_helpers import write

from assay.journal.store import Journal
from assay.model import (
    Candidate,
    Decision,
    Experiment,
    ExperimentState,
    Verdict,
)
from assay.research.brief import Findings, rank, render
from assay.research.gaps import collect, find_gaps
from assay.research.profile import HotSpot, ProfileResult
from assay.research.rerank import replace_sections
from assay.research.roofline import place, roof, workload
from assay.research.store import store_hypotheses
from assay.research.waves import classify, lessons

GPU = """\
// fuse what the graph allows
bool a = can_fuse(g, i, { GGML_OP_SOFT_MAX, GGML_OP_SCALE });
bool b = can_fuse(g, i, { GGML_OP_ROPE, GGML_OP_SET_ROWS });
bool c = can_fuse(g, i, { GGML_OP_SSM_CONV, GGML_OP_ADD });
bool d = can_fuse(g, i, { GGML_OP_ROPE, GGML_OP_ADD });
"""
OTHER = GPU  # a second backend agreeing on everything but SOFT_MAX + SCALE
CPU = """\
void f(int op) {
    switch (op) {
        case GGML_OP_SOFT_MAX: case GGML_OP_SCALE: case GGML_OP_ROPE:
        case GGML_OP_SET_ROWS: case GGML_OP_SSM_CONV: case GGML_OP_ADD: break;
    }
}
"""


def _findings(tmp_path: Path, hot: list[HotSpot]) -> Findings:
    write(tmp_path / "gpu" / "a.cu", GPU)
    write(tmp_path / "vk" / "b.cpp", OTHER.replace(
        "bool a = can_fuse(g, i, { GGML_OP_SOFT_MAX, GGML_OP_SCALE });\n", ""))
    write(tmp_path / "cpu" / "ops.c", CPU)
    reports = [("backend", find_gaps(collect(tmp_path / n, n), collect(tmp_path / "cpu", "cpu")))
               for n in ("gpu", "vk")]
    prof = ProfileResult("perf", "bench", hotspots=hot, samples=1000, exit_code=0)
    r = roof("x", "fp32", 1e11, 1e10)  # ridge 10 FLOP/byte
    w = workload(None, None, "")
    return Findings("t", "us", profile=prof, roof=r, workload=w, placement=place(w, r),
                    gaps=reports, editable=("cpu/**",))


HOT = [HotSpot("ggml_compute_forward_soft_max_f32", "cpu/ops.c", 1, 0.5),
       HotSpot("ggml_vec_soft_max_f32", "cpu/ops.c", 1, 0.17),
       HotSpot("ggml_graph_compute_thread", "cpu/ops.c", 1, 0.1)]


def test_a_gap_off_the_hot_path_ranks_below_one_on_it(tmp_path: Path) -> None:
    cold = rank(_findings(tmp_path, []))
    # without a profile the consensus of two backends wins
    assert cold[0].text.startswith(("Fuse ROPE → SET_ROWS", "Fuse SSM_CONV → ADD",
                                    "Fuse ROPE → ADD"))
    hyps = rank(_findings(tmp_path, HOT))
    kinds = [(h.source_kind, h.text.split(":")[0]) for h in hyps]
    # the hot spot itself and the one fusion touching it come first
    assert kinds[0] == ("profile", "Speed up SOFT_MAX")
    assert hyps[0].share == 0.67  # its two functions together
    assert kinds[1] == ("backend", "Fuse SOFT_MAX → SCALE in cpu")
    assert hyps[1].share == 0.335  # SCALE never runs here: half of what SOFT_MAX takes
    cold_ones = [h for h in hyps if h.share == 0]
    assert cold_ones and min(h.score for h in hyps if h.share) > max(
        h.score for h in cold_ones)
    # the soft_max hot spot is memory-bound by its op's own numbers
    assert "memory-bound" in hyps[0].text and "FLOP/byte" in hyps[0].text
    # the brief says why for each one
    assert all(h.why for h in hyps)
    assert hyps[1].why.startswith("touches 34% of the profiled time")
    assert cold_ones[0].why.startswith("its ops never appear in the profile")
    assert "; 1 implementation ships it" in hyps[1].why  # the GPU backend alone
    assert "; 2 implementations ship it" in cold_ones[0].why  # both backends
    text = render(_findings(tmp_path, HOT), hyps)
    assert "Why here: touches 67% of the profiled time" in text  # the hot spot
    assert "| 1 | - | profile |" in text


def test_rerunning_merges_with_the_open_hypotheses(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "j.sqlite")
    first = rank(_findings(tmp_path, HOT))
    store_hypotheses(journal, first)
    ids = {h.key: h.id for h in first}
    # the second run: other shares (so other texts and scores), the same ideas
    moved = [HotSpot(h.function, h.file, h.line, h.share * 0.8) for h in HOT]
    second = rank(_findings(tmp_path, moved))
    store_hypotheses(journal, second)
    assert {h.key: h.id for h in second} == ids
    stored = journal.hypotheses()
    assert len(stored) == len(first)
    by_id = {h.id: h for h in stored}
    for h in second:
        assert by_id[h.id].text == h.text and by_id[h.id].score == h.score
    journal.close()


def _exp(n: int, text: str, state: ExperimentState, lo: float, hi: float) -> Experiment:
    verdict = Verdict.KEEP if state is ExperimentState.KEPT else Verdict.DISCARD
    return Experiment(f"e{n}", n, state, Candidate("abc", "diff", hypothesis=text),
                      time.time(), time.time(),
                      Decision(verdict, "scripted", (lo + hi) / 2, lo, hi, delta=0.01))


def test_a_scripted_wave_reranks_toward_cutting_memory_traffic(tmp_path: Path) -> None:
    ev = _findings(tmp_path, HOT)
    before = rank(ev)
    state = tmp_path / "state"
    (state / "research").mkdir(parents=True)
    from assay.research.brief import hot_path_rows

    (state / "research" / "last.json").write_text(json.dumps(
        {"hot_path": hot_path_rows(ev), "hypotheses": []}))

    class Journalish:
        def experiments(self, states: object = None, patches: bool = True) -> list[Experiment]:
            return [
                _exp(1, "Vectorize the soft_max exp with AVX2 intrinsics",
                     ExperimentState.DISCARDED, -0.01, 0.012),
                _exp(2, "Unroll the soft_max max loop by 4 (SIMD)",
                     ExperimentState.DISCARDED, -0.02, 0.01),
            ]

    class Tgt:
        state_dir = state

    found = lessons(Journalish(), Tgt())  # type: ignore[arg-type]
    assert len(found) == 1
    text = found[0].text
    assert "2 compute micro-optimizations decided within noise on SOFT_MAX (67%" in text
    assert "the path is memory-bound" in text and "FLOP/byte" in text
    assert "cut memory traffic rank first" in text
    ev.lessons = found
    after = rank(ev)
    # a compute-kind hypothesis on the hot spot falls, a memory-kind one rises
    fusion_before = next(h for h in before if h.text.startswith("Fuse SOFT_MAX"))
    fusion_after = next(h for h in after if h.text.startswith("Fuse SOFT_MAX"))
    assert fusion_after.score > fusion_before.score
    assert "waves: up" in fusion_after.why
    assert classify("Vectorize with AVX2 intrinsics") == "compute"
    assert classify("Fuse the two passes to save a round trip through memory") == "memory"
    brief = render(ev, after)
    assert brief.index("## What the waves showed") < brief.index("## Hypotheses, ranked")
    replaced = replace_sections(render(ev, before), ["## Hypotheses, ranked", "", "new"])
    assert "new" in replaced and "## Profile" in replaced


def test_after_a_wave_the_brief_and_the_journal_say_what_it_showed(tmp_path: Path) -> None:
    from assay.research.brief import hot_path_rows
    from assay.research.rerank import after_wave
    from assay.research.store import write_brief

    class Tgt:
        state_dir = tmp_path / "state"

    target = Tgt()
    journal = Journal.open(tmp_path / "j.sqlite")
    ev = _findings(tmp_path, HOT)
    hyps = rank(ev)
    store_hypotheses(journal, hyps)
    (target.state_dir / "research").mkdir(parents=True)
    from dataclasses import asdict

    (target.state_dir / "research" / "last.json").write_text(json.dumps(
        {"hot_path": hot_path_rows(ev), "hypotheses": [asdict(h) for h in hyps]}))
    write_brief(target, render(ev, hyps))  # type: ignore[arg-type]
    assert not after_wave(target, journal)  # type: ignore[arg-type]  # nothing decided yet
    fusion = next(h for h in hyps if h.text.startswith("Fuse SOFT_MAX"))
    before = {h.id: h.score for h in journal.hypotheses()}
    for n, text in enumerate(("Vectorize the soft_max exp loop with AVX2 intrinsics",
                              "Unroll the soft_max max loop (SIMD)")):
        exp = journal.add_experiment(Candidate("abc", f"diff {n}", hypothesis=text))
        journal.set_decision(exp.id, Decision(Verdict.DISCARD, "scripted", 0.001, -0.01,
                                              0.012, delta=0.01))
        journal.set_state(exp.id, ExperimentState.DISCARDED)
    assert after_wave(target, journal)  # type: ignore[arg-type]
    brief = (target.state_dir / "research.md").read_text()
    assert "## What the waves showed" in brief
    assert "2 compute micro-optimizations decided within noise on SOFT_MAX" in brief
    assert brief.count("## Hypotheses, ranked") == 1 and "## Profile" in brief
    after = {h.id: h.score for h in journal.hypotheses()}
    assert after[fusion.id] > before[fusion.id]  # memory-traffic idea up
    assert not after_wave(target, journal)  # type: ignore[arg-type]  # the same wave twice

    def decide(n: int) -> None:
        for _ in range(n):
            e = journal.add_experiment(Candidate("abc", "", {"k": journal.count_experiments()},
                                                 hypothesis="Unroll the soft_max max loop"))
            journal.set_state(e.id, ExperimentState.DISCARDED)

    decide(98)  # 100 decided: a large journal re-ranks after each fiftieth more (2 here)
    assert after_wave(target, journal)  # type: ignore[arg-type]
    decide(1)
    assert not after_wave(target, journal)  # type: ignore[arg-type]
    decide(1)
    assert after_wave(target, journal)  # type: ignore[arg-type]
    journal.close()
