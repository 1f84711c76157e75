"""How often each decision rule keeps the wrong candidate, and what it costs.

Candidates with known true effects (0%, -2%, +1%, +3%, +5%; the metric is maximised) are
measured under run-to-run noise with heavy tails (Student t plus occasional slow runs),
a slow random-walk drift and per-slot offsets. Every rule sees identical draws: the i-th
run of a trial uses the same noise, spike and drift value whichever rule asks for it.

assay's engine is driven exactly as the loop drives it: A/A calibration blocks on every
slot feed :func:`assay.stats.calibrate`; then ``first_block`` / ``decide`` /
``next_block`` with ABBA blocks (two pairs per block), re-run blocks on the same slot and
the confirmation block on another slot. Every run counts, and the A/A blocks are charged
too, spread over the experiments of one session (``--session`` experiments share one
calibration).

An extra row drives expensive mode (``rule = "expensive"``) on the same draws:
candidate-only runs judged against three recorded incumbent runs per slot (reused, so not
charged), at most 24 candidate runs.

Peers, each on the same draws:

* single run: one candidate run beats the incumbent's last run (karpathy autoresearch,
  labloop's default). One run is charged: the incumbent's value is reused.
* labloop --confirm --min-delta 1sd: an A/B comparison won by more than one run sd
  (the calibrated sd), twice in a row; every run charged.
* piloop bootstrap: five A/B pairs, keep when the 95% paired-bootstrap lower bound of
  the mean log-ratio is above 0.
* Welch 5v5: five A runs and five B runs interleaved, keep on a one-sided Welch t test
  at 2.5% with B better.
* codeflash 5% floor: one A run and one B run, keep when B is better by more than 5%.

N* is the fixed-sample optimum for the same error targets: the smallest number of ABBA
pairs whose mean, thresholded at the oracle's 98th percentile under no effect, keeps at
least 90% of +3% candidates (the oracle knows the null distribution exactly, which no
real rule does). It is printed in runs (two per pair).

Run ``python benchmarks/decisions.py``: with the default 2,000 trials per cell it takes
about three CPU-minutes, spread over ``--jobs`` processes (2 by default); ``--trials``
sets the trials per cell.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sst

from assay.config import DecisionSpec
from assay.decision import DecisionContext
from assay.model import BlockKind, Direction, Pair, Verdict
from assay.stats import calibrate, make_rule

EFFECTS = (0.0, -0.02, 0.01, 0.03, 0.05)
SLOTS = ("s0", "s1", "s2", "s3")
MAX_RUNS = 400  # per trial; no rule comes near it

SPEC = DecisionSpec(rule="sequential", pairs_per_block=2, max_pairs=80, min_pairs=2,
                    confidence=0.90, delta=0.0075, confirm=True, aa_blocks=2)
EXPENSIVE_RUNS = 24  # candidate runs allowed in expensive mode


@dataclass(frozen=True)
class Scenario:
    name: str
    noise: float  # sd of the base run-to-run noise (log scale)
    tail_df: float  # Student t degrees of freedom of the base noise (inf: normal)
    spike_p: float  # probability of a slow run
    spike_sd: float  # its size, in noise sds (half-normal, always worse)
    drift: float  # random-walk step per run, in noise sds
    slot_offset: float  # sd of the per-slot level offset
    slot_scale: tuple[float, ...]  # per-slot noise multipliers
    tuned: bool


SCENARIOS = (
    Scenario("3% noise, t5 tails + slow runs, drift (tuned on)", 0.03, 5.0, 0.02, 4.0, 0.05,
             0.05, (1.0, 0.9, 1.1, 1.2), True),
    Scenario("1.5% noise, normal, strong drift (untuned)", 0.015, math.inf, 0.0, 0.0, 0.15,
             0.10, (1.0, 1.0, 1.0, 1.0), False),
    Scenario("5% noise, t3 tails, 5% slow runs, one slot 4x noisy (untuned)", 0.05, 3.0, 0.05,
             5.0, 0.05, 0.05, (1.0, 0.8, 1.2, 4.0), False),
)


class Stream:
    """The runs of one trial: identical for every rule."""

    def __init__(self, sc: Scenario, effect: float, rng: np.random.Generator) -> None:
        self.sc = sc
        self.theta = math.log1p(effect)
        if math.isinf(sc.tail_df):
            base = rng.standard_normal(MAX_RUNS)
        else:
            base = rng.standard_t(sc.tail_df, MAX_RUNS) / math.sqrt(sc.tail_df / (sc.tail_df - 2))
        spikes = (rng.random(MAX_RUNS) < sc.spike_p) * np.abs(rng.standard_normal(MAX_RUNS))
        self.eps = sc.noise * (base - sc.spike_sd * spikes)
        self.drift = np.cumsum(rng.standard_normal(MAX_RUNS)) * sc.drift * sc.noise
        self.offset = dict(zip(SLOTS, rng.standard_normal(len(SLOTS)) * sc.slot_offset,
                               strict=True))
        self.scale = dict(zip(SLOTS, sc.slot_scale, strict=True))
        self.home = SLOTS[int(rng.integers(len(SLOTS)))]
        self.i = 0

    def run(self, slot: str, role: str) -> float:
        i = min(self.i, MAX_RUNS - 1)
        self.i += 1
        log = (self.offset[slot] + self.drift[i] + self.scale[slot] * self.eps[i]
               + (self.theta if role == "B" else 0.0))
        return 100.0 * math.exp(log)

    def block(self, slot: str, order: str, kind: BlockKind, block_id: str) -> list[Pair]:
        a: list[float] = []
        b: list[float] = []
        for role in order:
            (b if role == "B" else a).append(self.run(slot, role))
        if not a:  # candidate-only runs reach the rule with a NaN incumbent side
            return [Pair(math.nan, v, slot, block_id, kind) for v in b]
        return [Pair(x, y, slot, block_id, kind) for x, y in zip(a, b, strict=False)]


def abba(pairs: int) -> str:
    return "ABBA" * (pairs // 2) + "AB" * (pairs % 2)


def aa_calibration(sc: Scenario, spec: DecisionSpec, rng: np.random.Generator
                   ) -> dict[str, list[Pair]]:
    """A/A blocks on every slot, from a stream of their own (measured before the session)."""
    st = Stream(sc, 0.0, rng)
    out: dict[str, list[Pair]] = {}
    for s in SLOTS:
        out[s] = []
        for k in range(spec.aa_blocks):
            out[s] += st.block(s, abba(spec.pairs_per_block), BlockKind.AA, f"aa-{s}-{k}")
    return out


def drive(rule_spec: DecisionSpec, ctx: DecisionContext, st: Stream,
          history: dict[str, tuple[float, ...]] | None = None) -> tuple[bool, float]:
    """Run one experiment through the engine the way the loop does; (kept, runs)."""
    rule = make_rule(rule_spec)
    usable = [s for s in SLOTS if s in ctx.noise] or list(SLOTS)
    home = st.home if st.home in usable else usable[0]
    other = next((s for s in usable if s != home), home)
    nb = rule.first_block(ctx)
    pairs: list[Pair] = []
    for step in range(200):
        slot = other if nb.other_slot else home
        order = nb.order or abba(nb.pairs)
        pairs += st.block(slot, order, nb.kind, f"b{step}")
        d = rule.decide(pairs, ctx)
        if d.verdict is not Verdict.CONTINUE:
            return d.verdict is Verdict.KEEP, st.i
        assert d.next_block is not None
        nb = d.next_block
    raise RuntimeError("the rule never decided")


def peers(st: Stream, run_sd: float, rng: np.random.Generator) -> dict[str, tuple[bool, float]]:
    """Each peer on the same draws (the stream is rewound for each)."""
    out: dict[str, tuple[bool, float]] = {}
    h = st.home
    st.i = 0
    a, b = st.run(h, "A"), st.run(h, "B")
    out["single run better"] = (b > a, 1)
    st.i = 0
    wins, runs = 0, 0
    for _ in range(2):
        a, b = st.run(h, "A"), st.run(h, "B")
        runs += 2
        if math.log(b / a) > run_sd:
            wins += 1
        else:
            break
    out["labloop --confirm 1sd"] = (wins == 2, runs)
    st.i = 0
    x = np.array([math.log(p.b / p.a) for k in range(3)
                  for p in st.block(h, "ABBA", BlockKind.COMPARE, str(k))][:5])
    boots = rng.choice(x, size=(1000, 5)).mean(axis=1)
    out["piloop bootstrap 5"] = (float(np.quantile(boots, 0.025)) > 0, 10)
    st.i = 0
    ra, rb = [], []
    for _ in range(5):
        ra.append(math.log(st.run(h, "A")))
        rb.append(math.log(st.run(h, "B")))
    t = sst.ttest_ind(rb, ra, equal_var=False, alternative="greater")
    out["Welch t 5v5"] = (float(t.pvalue) < 0.025, 10)
    st.i = 0
    a, b = st.run(h, "A"), st.run(h, "B")
    out["codeflash 5% floor"] = (b / a - 1 > 0.05, 2)
    return out


def n_star(sc: Scenario, rng: np.random.Generator, trials: int = 20000) -> int | None:
    """The oracle fixed-sample optimum, in runs (see the module docstring).

    Each trial runs on a slot drawn from those calibration keeps (a slot over three times
    the median noise of the others is left out, as assay quarantines it)."""
    med = float(np.median(sc.slot_scale))
    usable = np.array([v for v in sc.slot_scale if v <= 3 * med])

    def means(effect: float, n: int) -> np.ndarray:
        runs = 2 * n
        if math.isinf(sc.tail_df):
            base = rng.standard_normal((trials, runs))
        else:
            base = rng.standard_t(sc.tail_df, (trials, runs)) / math.sqrt(
                sc.tail_df / (sc.tail_df - 2))
        spikes = (rng.random((trials, runs)) < sc.spike_p) * np.abs(
            rng.standard_normal((trials, runs)))
        scale = rng.choice(usable, size=(trials, 1))
        eps = sc.noise * (base - sc.spike_sd * spikes) * scale
        steps = rng.standard_normal((trials, runs)) * sc.drift * sc.noise
        drift = np.cumsum(steps, axis=1)
        lev = eps + drift
        a_i = np.concatenate([np.arange(k, runs, 4) for k in (0, 3)])
        b_i = np.concatenate([np.arange(k, runs, 4) for k in (1, 2)])
        a_i, b_i = np.sort(a_i)[:n], np.sort(b_i)[:n]
        x = lev[:, b_i] - lev[:, a_i] + math.log1p(effect)
        return np.asarray(x.mean(axis=1))

    for n in range(1, 400):
        c = np.quantile(means(0.0, n), 0.98)
        if (means(0.03, n) > c).mean() >= 0.90:
            return 2 * n
    return None


def cell(index: int, effect: float, trials: int, seed: int, session: int,
         expensive: bool) -> dict[str, list[tuple[bool, float]]]:
    sc = SCENARIOS[index]
    rng = np.random.default_rng([seed, round(effect * 1000) + 100, index])
    res: dict[str, list[tuple[bool, float]]] = {}
    spec = SPEC
    for _ in range(trials):
        cal = calibrate(aa_calibration(sc, spec, rng), spec, Direction.MAXIMIZE)
        ctx = DecisionContext(Direction.MAXIMIZE, spec, cal.delta_effective,
                              slots=tuple(cal.noise), noise=cal.noise)
        st = Stream(sc, effect, rng)
        aa_runs = 4 * len(SLOTS) * spec.aa_blocks * spec.pairs_per_block // 2
        kept, runs = drive(spec, ctx, st)
        res.setdefault("assay sequential", []).append((kept, runs + aa_runs / session))
        if expensive:
            # incumbent runs already on record: three per slot, from the stream's past
            hist = {s: tuple(100.0 * math.exp(st.offset[s] + st.scale[s] * sc.noise
                                              * float(rng.standard_normal()))
                             for _ in range(3)) for s in ctx.noise}
            espec = replace(spec, rule="expensive", max_pairs=EXPENSIVE_RUNS)
            ectx = replace(ctx, spec=espec, incumbent_history=hist)
            st.i = 0
            kept, runs = drive(espec, ectx, st)
            res.setdefault("assay expensive (B only)", []).append((kept, runs + aa_runs / session))
        run_sd = cal.pooled / math.sqrt(2)
        for name, r in peers(st, run_sd, rng).items():
            res.setdefault(name, []).append(r)
    return res


def _cell(args: tuple[int, float, int, int, int, bool]
          ) -> tuple[int, float, dict[str, list[tuple[bool, float]]]]:
    i, e, trials, seed, session, expensive = args
    return i, e, cell(i, e, trials, seed, session, expensive)


def table(sc: Scenario, cells: dict[float, dict[str, list[tuple[bool, float]]]], trials: int,
          seed: int) -> tuple[dict[str, dict[float, tuple[float, float, int]]], int | None]:
    rows: dict[str, dict[float, tuple[float, float, int]]] = {}
    for e in EFFECTS:
        for name, rs in cells[e].items():
            kept = np.array([k for k, _ in rs])
            runs = np.array([r for _, r in rs])
            rows.setdefault(name, {})[e] = (float(kept.mean()), float(runs.mean()),
                                            math.ceil(float(runs.max())))
    ns = n_star(sc, np.random.default_rng(seed + 7))
    print(f"\n== {sc.name}: {trials} trials per cell, δ {SPEC.delta:.2%}, "
          f"confidence {SPEC.confidence:.0%}, max {SPEC.max_pairs} pairs")
    head = (f"{'rule':30s} {'FK 0%':>7s} {'FK -2%':>7s} {'K +1%':>7s} {'K +3%':>7s} "
            f"{'K +5%':>7s} {'mean runs':>10s} {'max runs':>9s}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        mean_runs = sum(v[1] for v in r.values()) / len(r)
        max_runs = max(v[2] for v in r.values())
        print(f"{name:30s} {r[0.0][0]:7.1%} {r[-0.02][0]:7.1%} {r[0.01][0]:7.1%} "
              f"{r[0.03][0]:7.1%} {r[0.05][0]:7.1%} {mean_runs:10.1f} {max_runs:9d}")
    a = rows["assay sequential"]
    per = "  ".join(f"{e:+.0%}: {a[e][1]:.1f}" for e in EFFECTS)
    print(f"assay mean runs by effect: {per}")
    print(f"fixed-sample optimum N* = {ns} runs (oracle threshold, ≤2% false keeps at 0%, "
          f"≥90% keeps at +3%)")
    return rows, ns


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--trials", type=int, default=2000, help="trials per cell (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--session", type=int, default=20,
                    help="experiments sharing one A/A calibration (default 20)")
    ap.add_argument("--scenarios", default="all", help="comma-separated indexes, or all")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--no-expensive", action="store_true", help="skip the expensive-mode row")
    args = ap.parse_args(argv)
    picks = range(len(SCENARIOS)) if args.scenarios == "all" else [
        int(i) for i in args.scenarios.split(",")]
    t0 = time.time()
    jobs = [(i, e, args.trials, args.seed, args.session, not args.no_expensive)
            for i in picks for e in EFFECTS]
    done: dict[int, dict[float, dict[str, list[tuple[bool, float]]]]] = {}
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_cell, jobs))
    else:
        results = [_cell(j) for j in jobs]
    for i, e, res in results:
        done.setdefault(i, {})[e] = res
    print(f"A/A calibration: {SPEC.aa_blocks} ABBA block(s) on each of {len(SLOTS)} slots, "
          f"charged over {args.session} experiments "
          f"({4 * len(SLOTS) * SPEC.aa_blocks / args.session:.1f} runs per decision)")
    summary = ""
    for i in picks:
        sc = SCENARIOS[i]
        rows, ns = table(sc, done[i], args.trials, args.seed)
        if sc.tuned:
            a = rows["assay sequential"]
            mean_runs = sum(v[1] for v in a.values()) / len(a)
            ratio = mean_runs / ns if ns else math.inf
            ok = (a[0.0][0] <= 0.02 and a[-0.02][0] <= 0.02 and a[0.03][0] >= 0.90
                  and ratio <= 0.7)
            summary = (f"SUMMARY: at 3% noise assay false-keep {a[0.0][0]:.1%}/{a[-0.02][0]:.1%}"
                       f", keeps {a[0.03][0]:.0%} of +3%, mean runs {mean_runs:.1f} = "
                       f"{ratio:.2f} x N*={ns}: {'PASS' if ok else 'FAIL'}")
    print(f"\n({time.time() - t0:.0f} s)")
    if summary:
        print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
