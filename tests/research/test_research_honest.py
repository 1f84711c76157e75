"""Honest profiles, measured peaks, and diffs of hot functions against another version."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from research_helpers import write

from assay.research.brief import Findings, rank, render
from assay.research.diffs import body, hot_function_diffs
from assay.research.gaps import collect
from assay.research.peaks import measured
from assay.research.profile import HotSpot, ProfileResult, judge, profile_command
from assay.research.roofline import roof

FAILING = """\
def work():
    s = 0
    for i in range(200000):
        s += i * i
    return s


for _ in range(5):
    work()
raise SystemExit(3)
"""


def test_a_failing_benchmark_gives_no_hot_spots_and_says_why(tmp_path: Path) -> None:
    write(tmp_path / "bench.py", FAILING)
    res = profile_command(f"{sys.executable} bench.py", tmp_path, prefer="cProfile",
                          timeout_s=120)
    assert res.exit_code == 3
    assert res.hotspots == []
    assert any("exited with 3" in n and "no hot spots" in n for n in res.notes)


def test_a_profile_of_kernel_and_idle_frames_says_so() -> None:
    res = ProfileResult("perf", "bench", exit_code=0, hotspots=[
        HotSpot("_raw_spin_unlock_irq", "[kernel.kallsyms]", None, 0.5, in_target=False),
        HotSpot("do_idle", "[kernel.kallsyms]", None, 0.2, in_target=False),
        HotSpot("compute", "libmine.so", None, 0.3, in_target=True)])
    judge(res)
    assert any("dominated by kernel or idle frames (70%" in n for n in res.notes)
    busy = ProfileResult("perf", "bench", exit_code=0, hotspots=[
        HotSpot("compute", "libmine.so", None, 0.9, in_target=True)])
    judge(busy)
    assert not busy.notes


def test_peaks_are_measured_cached_and_used_for_the_roof(tmp_path: Path) -> None:
    first = measured("cpu", where=tmp_path, quick=True)
    assert first is not None and first.bandwidth is not None
    assert first.bandwidth.value > 1e7 and first.bandwidth.repeats == 5
    assert first.bandwidth.spread >= 0 and "triad" in first.bandwidth.method.lower()
    assert first.flops["fp32"].value > 1e6 and "matmul" in first.flops["fp32"].method
    again = measured("cpu", where=tmp_path, quick=True)
    assert again is not None and again.at == first.at  # from the cache
    # a roof for this machine, no table row needed: the measured figures, with the method
    cached = next(tmp_path.glob("cpu-*-quick.json"))
    cached.with_name(cached.name.replace("-quick", "")).write_text(cached.read_text())
    r = roof("", "fp32", measure=True, cache_dir=tmp_path)
    assert r.bandwidth == first.bandwidth.value
    assert r.peak_flops == first.flops["fp32"].value
    assert r.basis.startswith("measured on this machine") and "spread" in r.basis
    assert json.loads(cached.read_text())["fingerprint"] == first.fingerprint


MINE = """\
#include <math.h>

static void softmax_row(float * x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - m); s += x[i]; }
    for (int i = 0; i < n; i++) x[i] /= s;
}
"""
THEIRS = """\
#include <immintrin.h>
// helpers first, so the function sits at another line
static inline float hmax(__m256 v) { return 0; }

static void softmax_row(float * x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    __m256 acc = _mm256_setzero_ps();
    float s = vec_exp_sum(x, n, m, &acc);
    const float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}
"""


def test_a_hot_function_is_diffed_against_the_other_version(tmp_path: Path) -> None:
    write(tmp_path / "mine" / "ops.c", MINE)
    write(tmp_path / "fork" / "src" / "ops.c", THEIRS)
    mine = collect(tmp_path / "mine", "mine", cite_prefix="")
    fork = collect(tmp_path / "fork", "fork")
    assert body(tmp_path / "mine" / "ops.c", 3)[-1] == "}"
    prof = ProfileResult("perf", "bench", exit_code=0, hotspots=[
        HotSpot("softmax_row", "ops.c", 7, 0.6, in_target=True)])
    diffs = hot_function_diffs(prof, mine, [fork])
    assert len(diffs) == 1
    d = diffs[0]
    assert (d.mine, d.theirs, d.matched_by) == ("ops.c:3", "fork/src/ops.c:5", "name")
    # hunks carry both files' own line numbers
    assert "@@ -4,6 +6,7 @@" in d.diff  # `float m = x[0];` is line 4 here, 6 there
    assert "+    __m256 acc = _mm256_setzero_ps();" in d.diff
    assert "uses AVX2 intrinsics" in d.summary
    assert any(s.startswith("calls ") and "vec_exp_sum" in s for s in d.summary)
    ev = Findings("t", "us", profile=prof, diffs=diffs)
    hyps = rank(ev)
    diff_hyp = next(h for h in hyps if h.source_kind == "diff")
    assert diff_hyp.sources == ("fork/src/ops.c:5", "ops.c:3")
    assert "Port fork's version of softmax_row" in diff_hyp.text
    assert "uses AVX2 intrinsics" in diff_hyp.text and "60% of the profiled time" in \
        diff_hyp.text
    assert "```diff" in render(ev, hyps)
