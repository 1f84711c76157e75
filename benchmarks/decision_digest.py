"""A digest of seeded decisions made by the loop's own code: equal digests, equal decisions.

Run ``python benchmarks/decision_digest.py`` before and after a change that must not change
any decision (a restructuring, a rename): it decides 180 candidates with
:func:`assay.planning.simulate.decide` (A/A calibration, noise tracking, ``decide_next`` and
the rule, on an in-memory journal): three rules (fixed, sequential, expensive) × one and two
slots × five true effects (−3%, 0, +1%, +3%, +6%) × six seeds, runs with 2% log-normal noise
and slots 1% apart. It prints one line per decision (verdict, effect, interval, runs,
reason), a table of verdicts per rule, and the digest of all lines; ``--expect DIGEST`` ends
with PASS when the digest is the one given, FAIL otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from collections import Counter

from assay.planning.simulate import SimDecision, decide

RULES = ("fixed", "sequential", "expensive")
EFFECTS = (-0.03, 0.0, 0.01, 0.03, 0.06)
SEEDS = 6
NOISE = 0.02


def one(rule: str, slots: int, effect: float, seed: int) -> SimDecision:
    rng = random.Random(f"{rule}/{slots}/{effect}/{seed}")

    def run(role: str, slot: int) -> float:
        value = 100.0 * (1 + 0.01 * slot) * (1 - effect if role == "B" else 1.0)
        return value * rng.lognormvariate(0, NOISE)

    return decide(run, {"rule": rule, "delta": 0.01}, slots=slots)


def line(rule: str, slots: int, effect: float, seed: int, d: SimDecision) -> str:
    eff = "-" if d.effect is None else f"{d.effect:+.9f}"
    ci = "-" if d.interval is None else f"[{d.interval[0]:+.9f}, {d.interval[1]:+.9f}]"
    return f"{rule} {slots} {effect:+.2f} {seed} {d.verdict} {eff} {ci} {d.runs} {d.reason}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--expect", default="", help="the digest a run must reproduce")
    ap.add_argument("--quiet", action="store_true", help="leave out the per-decision lines")
    args = ap.parse_args()
    lines: list[str] = []
    verdicts: dict[str, Counter[str]] = {r: Counter() for r in RULES}
    for rule in RULES:
        for slots in (1, 2):
            for effect in EFFECTS:
                for seed in range(SEEDS):
                    d = one(rule, slots, effect, seed)
                    verdicts[rule][d.verdict] += 1
                    lines.append(line(rule, slots, effect, seed, d))
    if not args.quiet:
        print("\n".join(lines))
    print(f"\n{'rule':<12}{'keep':>6}{'discard':>9}{'other':>7}")
    for rule in RULES:
        c = verdicts[rule]
        other = sum(c.values()) - c["keep"] - c["discard"]
        print(f"{rule:<12}{c['keep']:>6}{c['discard']:>9}{other:>7}")
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    if not args.expect:
        print(f"SUMMARY: {len(lines)} decisions, digest {digest}")
        return 0
    ok = digest == args.expect
    print(f"SUMMARY: {len(lines)} decisions, digest {digest}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
