"""The total improvement of a run, measured paired: the baseline against the final best.

The baseline and the best that a run's summary could compare are medians measured at
different times, under different load. The figure a user reads as "the run made it this
much better" is instead measured directly: the base commit (A) against the final incumbent
(B) in ABBA blocks, each block on one slot, with the run's own decision rule and
calibration (:func:`assay.measure.compare.compare`, an ordinary :class:`~assay.loop.driver.Loop`
in a journal of its own under ``.assay/verify/``). Its effect and interval are relative
improvements, positive when the final best is better (``B/A - 1`` to maximize, ``A/B - 1``
to minimize), like every effect assay prints.

Each kept change's effect is measured against the incumbent of its time, so the chain of
keeps compounds: ``(1 + e1)(1 + e2)... - 1``. Measured at different times under different
load, that product can miss the paired figure by far; so with two or more keeps the
verification also measures the chain together (:mod:`assay.measure.chain`: the baseline and every
kept commit once per round, ``[run] chain_rounds`` rounds), whose steps compound exactly to
the chain's own total of the final best against the baseline.

It runs at the end of ``assay run`` (``[run] verify = true``, the default) when something is
kept that no verification has measured yet and the time budget allows, and on demand with
``assay verify``. The result is stored in the journal (meta ``verification``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..config.fidelity import last_level
from ..config.spec import Target
from ..errors import AssayError
from ..journal.store import Journal
from ..model import Experiment, ExperimentState
from ..records import KeepCheck, Verification
from . import chain
from .compare import Comparison, compare, env_params

Report = Callable[[str], None]


def compounded(effects: Iterable[float | None]) -> float | None:
    """The improvements of a chain of keeps compounded: ``prod(1 + e) - 1`` (None: none)."""
    total, n = 1.0, 0
    for e in effects:
        if e is None or not math.isfinite(e) or e <= -1.0:
            continue
        total *= 1.0 + e
        n += 1
    return total - 1.0 if n else None


def kept_effects(kept: Iterable[Experiment]) -> list[float | None]:
    """The effects of the kept changes (``kept``: the kept experiments, in order)."""
    return [e.decision.effect if e.decision else None for e in kept]


def current(journal: Journal) -> Verification | None:
    """The stored verification when it measured the present incumbent, else None."""
    v = journal.verification()
    inc = journal.incumbent()
    if v is None or inc is None or v.final != inc.commit:
        return None
    return v


def pending(journal: Journal) -> str:
    """Why there is nothing to verify ('' when the incumbent waits for a verification)."""
    base = journal.base_commit()
    inc = journal.incumbent()
    if base is None or inc is None:
        return "the journal holds no run yet; `assay run` first"
    if inc.commit == base:
        return f"nothing was kept: the incumbent is still the baseline {base[:12]}"
    if current(journal) is not None:
        return f"the final best {inc.commit[:12]} is already verified"
    return ""


def estimate_s(journal: Journal, target: Target) -> float | None:
    """A generous estimate of a verification's time: the budget of pairs, one slot, and
    the chain's rounds (with a warm-up run each) when two or more changes were kept, at the
    median wall time of the latest kept experiment's runs at the level keeps are decided at
    (None when unknown)."""
    kept = journal.experiments([ExperimentState.KEPT])
    if not kept:
        return None
    last = last_level(target.fidelity)  # where a verification measures: not a screen's
    at_last = {b.id for b in journal.blocks(kept[-1].id) if b.level == last}
    walls = [r.wall_s for r in journal.runs(kept[-1].id) if r.wall_s and r.block_id in at_last]
    if not walls:
        return None
    pairs = 2.0 * target.decision.max_pairs
    kept_n = len(kept)
    rounds = target.run.chain_rounds
    chain = (kept_n + 1) * (rounds + 1) if kept_n >= 2 and rounds > 0 else 0
    return (pairs + chain) * statistics.median(walls)


def verify(target: Target, journal: Journal, report: Report = lambda m: None,
           detail: Report | None = None) -> Verification:
    """Measure the final incumbent against the baseline and store the result.

    ``report`` gets the one line that says what is measured; ``detail`` (``report`` when
    not given) gets the comparison's own lines (its calibration and decision)."""
    base = journal.base_commit()
    inc = journal.incumbent()
    if base is None or inc is None or inc.commit == base:
        raise AssayError(f"nothing to verify: {pending(journal)}")
    run = journal.run_name() or target.run.name or "main"
    defaults = {p.name: p.default for p in target.params if p.default is not None}
    cmp = Comparison(
        label=f"verify-{inc.commit[:12]}", incumbent=base, candidate=inc.commit,
        incumbent_params=env_params(target, defaults),
        candidate_params=env_params(target, inc.params),
        hypothesis=f"the final best {inc.commit[:12]} against the baseline {base[:12]}")
    report(f"verifying: the baseline {base[:12]} against the final best {inc.commit[:12]} in "
           "ABBA blocks, with the run's decision rule")
    m = compare(target, run, cmp, target.state_dir / "verify",
                journal.calibration(last_level(target.fidelity)), detail or report,
                scratch=f"{run}-verify")
    effects = kept_effects(journal.experiments([ExperimentState.KEPT], patches=False))
    kept = sum(1 for e in effects if e is not None)
    chain_result: dict[str, Any] | None = None
    if kept >= 2 and target.run.chain_rounds > 0:
        if target.run.executor != "local":
            report(f"the chain of keeps is not measured together: it runs on this machine's "
                   f"slots, and this run's executor is {target.run.executor}")
        else:
            try:
                chain_result = chain.measure(target, journal, target.run.chain_rounds,
                                             detail or report).as_dict()
            except AssayError as exc:  # the paired total above still stands and is stored
                chain_result = {"error": str(exc)}
            report(chain.words(chain_result))
    v = Verification(base=base, final=inc.commit, state=m.state, effect=m.effect, lo=m.lo,
                     hi=m.hi, pairs=m.pairs, runs=m.runs, reason=m.reason,
                     compounded=compounded(effects), kept=kept, at=time.time(),
                     journal=str(m.journal), chain=chain_result)
    journal.set_verification(v)
    return v




def chain_interval(kept: Sequence[Experiment]) -> tuple[float, float] | None:
    """The kept effects' intervals compounded, ``prod(1 + lo) - 1`` to ``prod(1 + hi) - 1``:
    where the keeps' own evidence puts the chain's total. None when a keep has no interval."""
    lo = hi = 1.0
    for e in kept:
        d = e.decision
        if d is None or d.lo is None or d.hi is None:
            return None
        lo, hi = lo * (1.0 + d.lo), hi * (1.0 + d.hi)
    return (lo - 1.0, hi - 1.0) if kept else None


def unreproduced(v: Mapping[str, Any] | None, kept: Sequence[Experiment]) -> str:
    """The warning said first when the paired verification ``v`` (of the present final
    best) does not reproduce the keeps ``kept``: its interval contains zero while changes
    were kept, or lies wholly apart from the keeps' own intervals compounded
    (:func:`chain_interval`; the compounded point where a keep has no interval), so the two
    measurements cannot both hold. '' when it reproduces them (or there is no verification,
    or nothing was kept)."""
    if not v or not kept:
        return ""
    effect, lo, hi, comp = v.get("effect"), v.get("lo"), v.get("hi"), v.get("compounded")
    if effect is None or lo is None or hi is None:
        return ""
    chain = chain_interval(kept)
    if chain is None and comp is not None:
        chain = (comp, comp)
    if lo <= 0.0 <= hi:
        why = "contains zero"
    elif chain is not None and (hi < chain[0] or lo > chain[1]):
        span = (f"{chain[0]:+.2%}" if chain[0] == chain[1] else
                f"{comp:+.2%} [{chain[0]:+.2%}, {chain[1]:+.2%}]" if comp is not None else
                f"[{chain[0]:+.2%}, {chain[1]:+.2%}]")
        why = f"lies apart from the {span} the keeps compound to"
    else:
        return ""
    ids = ", ".join(e.id for e in kept)
    return (f"the keeps are not reproduced: the final best measured against the baseline "
            f"gives {effect:+.2%} [{lo:+.2%}, {hi:+.2%}], whose interval {why}; kept: "
            f"{ids}; `assay verify --per-keep` measures each keep alone against its parent")


def per_keep(target: Target, journal: Journal, report: Report = lambda m: None,
             detail: Report | None = None) -> list[KeepCheck]:
    """Measure every kept change alone against its parent, with the run's decision rule
    and calibration, and store the results in the journal (meta ``per_keep``)."""
    kept = journal.experiments([ExperimentState.KEPT], patches=False)
    if not kept:
        raise AssayError(f"nothing to verify per keep: {pending(journal)}")
    run = journal.run_name() or target.run.name or "main"
    out: list[KeepCheck] = []
    for e in kept:
        blocks = journal.blocks(e.id)
        if not e.commit or not blocks:
            continue
        parent = blocks[-1].incumbent
        cmp = Comparison(
            label=f"keep-{e.id}", incumbent=parent.commit, candidate=e.commit,
            incumbent_params=env_params(target, parent.params),
            candidate_params=env_params(target, {**parent.params, **e.candidate.params}),
            hypothesis=f"{e.id} alone against its parent {parent.commit[:12]}")
        report(f"measuring {e.id} ({e.commit[:12]}) alone against its parent "
               f"{parent.commit[:12]}")
        m = compare(target, run, cmp, target.state_dir / "verify" / "per-keep",
                    journal.calibration(last_level(target.fidelity)), detail or report,
                    scratch=f"{run}-verify")
        check = KeepCheck(e.id, parent.commit, e.commit,
                          e.decision.effect if e.decision else None, m.state, m.effect, m.lo,
                          m.hi, m.pairs, m.reason, str(m.journal))
        report(check.words())
        out.append(check)
    journal.set_keep_checks(out)
    return out
