"""Noise kept for a running loop: A/A calibration at the start, a new slot's own
calibration, and every measured block folded into its slot's noise estimate.

The statistics are pure functions in :mod:`assay.decision.stats.noise` and
:mod:`assay.decision.stats.calibrate`; this module holds what surrounds them in a run: which A/A
blocks to queue and where, what the journal keeps (``calibration``, ``noise_samples``,
``noise_recent``, each block's noise), which slots to quarantine, and what the user is told.
:class:`~assay.loop.driver.Loop` owns one and calls it from ``begin`` (:meth:`Calibration.queue`),
``dispatch`` (:meth:`Calibration.new_slots`) and ``tell`` (:meth:`Calibration.update`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

from ..config.spec import Target
from ..decision import stats
from ..decision.stats import expensive
from ..decision.stats.calibrate import state_of
from ..decision.stats.noise import CALIBRATION_PAIRS as AA_PAIRS
from ..decision.stats.noise import (
    WINDOW,
    block_samples,
    block_scale,
    changes,
    delta_moved,
    delta_reason,
    describe,
    track,
    window_counts,
)
from ..executors.base import Executor
from ..journal.store import Journal
from ..model import (
    BlockKind,
    BlockResult,
    BlockRow,
    BlockState,
    Incumbent,
    NextBlock,
    Pair,
    RunStatus,
    as_pairs,
)
from ..records import CalibrationRecord, DeltaStep

CAL = "cal"  # the experiment id of A/A calibration blocks


class Calibration:
    """The noise of a loop's slots, from its A/A blocks and then from every block."""

    def __init__(self, target: Target, journal: Journal, executor: Executor,
                 incumbent: Callable[[], Incumbent], emit: Callable[[str, str], None],
                 fail: Callable[[str], None], level: int = 0) -> None:
        self.target = target
        self.level = level  # with [fidelity]: the level whose noise this is
        self.journal = journal
        self.executor = executor
        self.incumbent = incumbent
        self.emit = emit
        self.fail = fail
        self.done = False  # the start-up calibration is in (or none was asked for)
        self.fresh: set[str] = set()  # slots that appeared after calibration, measuring noise
        self._slot_names: tuple[str, ...] = ()  # the slots seen at the last dispatch

    def _cal_blocks(self, states: tuple[BlockState, ...] = ()) -> list[BlockRow]:
        """This level's A/A blocks."""
        return [b for b in self.journal.blocks(CAL, states=states) if b.level == self.level]

    @property
    def at(self) -> str:
        """' at TIME_BUDGET=30' with [fidelity], '' without."""
        fid = self.target.fidelity
        return "" if fid is None else f" at {fid.label(self.level)}"

    @property
    def delta(self) -> float:
        """The effective δ: calibrated, else the configured one."""
        cal = self.journal.calibration(self.level)
        if cal is None or cal.delta is None:
            return float(self.target.decision.delta)
        return float(cal.delta)

    def resume(self) -> None:
        """A journal that holds a calibration needs none again."""
        self.done = self.journal.calibration(self.level) is not None

    def update(self, result: BlockResult) -> None:
        """The one place a finished block updates what the loop knows about noise.

        When the last A/A calibration block is in, calibrate (per-slot noise, quarantine,
        the effective δ); after that every measured block is folded into its slot's
        estimate (:meth:`_track`).
        """
        if result.experiment_id == CAL:
            if self.journal.calibration(self.level) is not None:
                self._fresh_block(result)  # a slot that appeared after calibration
            else:
                self._finish(result)
        elif not result.error:
            self._track(result)

    def new_slots(self) -> None:
        """A slot that appears after calibration (a node replacing a quarantined one) gets
        A/A blocks of its own, and measures nothing else until they are in: a fresh machine
        is another machine, its noise unknown."""
        names = tuple(s.name for s in self.executor.slots)
        if names == self._slot_names:
            return
        self._slot_names = names
        cal = self.journal.calibration(self.level)
        if cal is None or self.target.decision.aa_blocks <= 0:
            return
        known = {*cal.noise, *cal.quarantined, *self.journal.noise_samples(self.level)}
        pending = {b.prefer_slot for b in self._cal_blocks(
            states=(BlockState.QUEUED, BlockState.RUNNING))}
        pairs = self.target.decision.pairs_per_block
        per_slot = max(self.target.decision.aa_blocks, -(-AA_PAIRS // max(1, pairs)))
        if self.target.decision.rule == "expensive":
            per_slot, pairs = 1, expensive.CALIBRATION_PAIRS
        for slot in self.executor.slots:
            if slot.name in pending:  # queued earlier (before a restart)
                self.fresh.add(slot.name)
                continue
            if slot.name in known:
                continue
            self.fresh.add(slot.name)
            for _ in range(per_slot):
                self.journal.add_block(CAL, BlockKind.AA, NextBlock(pairs).run_order(),
                                       self.incumbent(), prefer_slot=slot.name,
                                       platform=slot.platform, level=self.level)
            self.emit("calibrate", f"slot {slot.name} is new (on {slot.host or 'a new node'}): "
                                   f"measuring its noise with {per_slot} A/A block(s), "
                                   f"{per_slot * pairs} pairs, before it measures anything")

    def _fresh_block(self, result: BlockResult) -> None:
        """A new slot's A/A block: its samples start the slot's noise estimate; when its last
        one is in, the slot measures like any other (unless its noise quarantined it)."""
        slot = result.slot or ""
        if result.error or incumbent_failure(result):
            self.fresh.discard(slot)
            why = (f"its calibration{self.at} failed: "
                   f"{result.error or incumbent_failure(result)}")
            for b in self._cal_blocks(states=(BlockState.QUEUED,)):
                if b.prefer_slot == slot:
                    self.journal.cancel_block(b.id, why)
            for s in self.executor.slots:
                if s.name == slot:
                    self.journal.set_slot(s.name, s.host, s.gpus, None, True, why)
            self.executor.quarantine(slot)
            self.emit("quarantine", f"slot {slot} quarantined: {why}")
            return
        self._track(result)
        if any(b.prefer_slot == slot for b in self._cal_blocks(
                states=(BlockState.QUEUED, BlockState.RUNNING))):
            return
        self.fresh.discard(slot)
        cal = self.journal.calibration(self.level) or CalibrationRecord()
        if slot in cal.quarantined:
            return  # _track said so
        noise = cal.noise.get(slot)
        for s in self.executor.slots:
            if s.name == slot:
                self.journal.set_slot(s.name, s.host, s.gpus, noise, False, "")
        said = "-" if noise is None else f"{float(noise):.2%}"
        self.emit("calibrated", f"slot {slot} calibrated: noise {said}; it measures from now on "
                                f"({cal.message})")

    def _track(self, result: BlockResult) -> None:
        """Fold a measured block's noise samples into its slot's estimate; δ and quarantine
        follow the current estimate, and every change is reported with its reason."""
        cal = self.journal.calibration(self.level)
        if cal is None or not result.slot:
            return
        new = block_samples(result.runs, self.target.metric.name)
        samples = self.journal.noise_samples(self.level)
        recent = self.journal.noise_recent(self.level)
        spec = self.target.decision
        before = track(samples, spec, cal.quarantined, recent)
        if new:
            samples[result.slot] = (samples.get(result.slot, []) + new)[-WINDOW:]
            recent = (recent + [(result.slot, v) for v in new])[-4 * WINDOW:]
        after = track(samples, spec, cal.quarantined, recent)
        slot_noise = block_scale(after.noise.get(result.slot,
                                             after.raw.get(result.slot, math.nan)), new)
        step = None
        if delta_moved(before.delta, after.delta):
            step = DeltaStep(block=result.block_id, slot=result.slot, old=before.delta,
                             new=after.delta, why=delta_reason(before.delta, after, spec))
        with self.journal.tx():
            self.journal.set_noise_samples(samples, self.level)
            self.journal.set_noise_recent(recent, self.level)
            if math.isfinite(slot_noise):
                self.journal.set_block_noise(result.block_id, slot_noise)
            self.journal.set_calibration(dataclasses.replace(
                cal, noise=dict(after.noise), pooled=after.pooled,
                delta=after.delta, quarantined=dict(after.quarantined),
                samples=dict(after.samples), message=describe(after, spec),
                regime=after.regime.as_meta() if after.regime is not None else None),
                self.level)
            if step is not None:
                self.journal.set_delta_steps([*self.journal.delta_steps(self.level), step],
                                             self.level)
        for line in changes(before, after, spec):
            self.emit("noise", f"after block {result.block_id} on slot {result.slot}: {line}")
        for slot in self.executor.slots:
            if slot.name in after.quarantined and slot.name not in before.quarantined:
                self.journal.set_slot(slot.name, slot.host, slot.gpus,
                                      after.raw.get(slot.name), True,
                                      after.quarantined[slot.name])
                self.executor.quarantine(slot.name)
            elif slot.name == result.slot and slot.name not in after.quarantined \
                    and slot.name not in self.fresh and slot.name in after.noise \
                    and self.level == 0:
                # the slot's row shows its current estimate, not the one from calibration
                self.journal.set_slot(slot.name, slot.host, slot.gpus,
                                      after.noise[slot.name], False, "")

    def queue(self) -> None:
        """Queue A/A blocks on every slot (once per run)."""
        if self.done or self.target.decision.aa_blocks <= 0:
            self.done = True
            return
        if self._cal_blocks():
            return  # already queued (or resumed)
        inc = self.incumbent()
        pairs = self.target.decision.pairs_per_block
        slots = self.executor.slots
        if self.target.decision.rule == "expensive":
            # two incumbent runs per slot at most; they are the slot's first history
            per_slot, pairs = 1, expensive.CALIBRATION_PAIRS
            why = ("the expensive rule runs one A/A block per slot, its runs the slot's first "
                   "history")
        else:
            per_slot = max(self.target.decision.aa_blocks,
                           -(-AA_PAIRS // max(1, len(slots) * max(1, pairs))))
            asked = self.target.decision.aa_blocks
            why = (f"a stable noise estimate needs at least {AA_PAIRS} A/A pairs, and "
                   f"{asked} block(s) of {pairs} pair(s) on {len(slots)} slot(s) give "
                   f"{asked * pairs * len(slots)}")
        given = self.target.decision.aa_blocks_given  # a default raised is no surprise
        if given and per_slot != self.target.decision.aa_blocks and not self.level:  # once
            self.emit("warn", f"[decision] aa_blocks = {self.target.decision.aa_blocks} is "
                              f"overridden: {per_slot} per slot, because {why}")
        for slot in slots:
            for _ in range(per_slot):
                self.journal.add_block(CAL, BlockKind.AA, NextBlock(pairs).run_order(), inc,
                                       prefer_slot=slot.name, platform=slot.platform,
                                       level=self.level)
        self.emit("calibrate", f"measuring noise{self.at}: {per_slot} A/A block(s) on each of "
                               f"{len(slots)} slot{'' if len(slots) == 1 else 's'}, "
                               f"{per_slot * pairs * len(slots)} A/A pairs in all (at least "
                               f"{AA_PAIRS} for a stable estimate)")

    def _finish(self, result: BlockResult | None = None) -> None:
        blocks = self._cal_blocks()
        broken = incumbent_failure(result) if result is not None else ""
        if broken:  # fail fast: one crash or hang is enough, the other blocks would repeat it
            why = f"calibration{self.at} failed: {broken}; fix the target, then run again"
            self.journal.drop_blocks(CAL, self.level)  # measure again on the next run
            self.emit("error", why)
            self.fail(why)
            return
        if any(b.state in (BlockState.QUEUED, BlockState.RUNNING) for b in blocks):
            return
        aa: dict[str, list[Pair]] = {}
        for b in blocks:
            runs = self.journal.runs(block_id=b.id)
            # Both sides ran the incumbent: relabel the B side as the second arm.
            aa.setdefault(b.slot or "", []).extend(
                as_pairs(runs, self.target.metric.name, b.slot or "", b.id, BlockKind.AA))
        empty = [b for b in blocks if not any(p for p in as_pairs(
            self.journal.runs(block_id=b.id), self.target.metric.name, "", b.id))]
        if empty:
            runs = self.journal.runs(block_id=empty[0].id)
            bad = next((r for r in runs if r.status is not RunStatus.OK), None)
            why = (f"calibration{self.at} failed: the incumbent's benchmark gave no usable pair "
                   f"on slot "
                   f"{empty[0].slot}"
                   + (f" ({bad.status.value}: {bad.reason}; logs: {bad.stderr_path})" if bad
                      else "") + "; fix the target, then run again")
            self.journal.drop_blocks(CAL, self.level)  # measure again on the next run
            self.emit("error", why)
            self.fail(why)
            return
        cal = stats.calibrate(aa, self.target.decision, self.target.metric.direction)
        base = [v for b in blocks for r in self.journal.runs(block_id=b.id)
                if r.status is RunStatus.OK
                and isinstance(v := r.metrics.get(self.target.metric.name), (int, float))]
        self.journal.set_calibration(CalibrationRecord(
            noise=dict(cal.noise), pooled=cal.pooled, delta=cal.delta_effective,
            quarantined=dict(cal.quarantined), message=cal.message,
            samples=window_counts(cal.samples),
            baseline=statistics.median(base) if base else None,
            start={"pooled": cal.pooled, "delta": cal.delta_effective},
            regime=cal.regime.as_meta() if cal.regime is not None else None,
            level=self.level), self.level)
        spec = self.target.decision
        moved = delta_moved(spec.delta, cal.delta_effective)
        self.journal.set_delta_steps([DeltaStep(
            block=CAL, slot="", old=spec.delta, new=cal.delta_effective,
            why=delta_reason(spec.delta, state_of(cal), spec))] if moved else [], self.level)
        self.journal.set_noise_samples(cal.samples, self.level)
        self.journal.set_noise_recent([(s, v) for s, vs in cal.samples.items() for v in vs],
                                      self.level)
        for slot in self.executor.slots:
            q = slot.name in cal.quarantined
            if not q and self.level:
                continue  # a slot's row shows the first level's noise
            self.journal.set_slot(slot.name, slot.host, slot.gpus, cal.noise.get(slot.name), q,
                                    cal.quarantined.get(slot.name, ""))
            if q:
                self.executor.quarantine(slot.name)
                self.emit("quarantine", f"slot {slot.name} quarantined: "
                                        f"{cal.quarantined[slot.name]}")
        self.done = True
        self.emit("calibrated", f"{self.at.strip()}: {cal.message}" if self.at else cal.message)


def incumbent_failure(result: BlockResult) -> str:
    """Why a calibration block shows the incumbent broken ('' when it does not)."""
    if result.error_kind and result.error_kind != "cancelled":
        return result.error
    bad = next((r for r in result.runs if r.status in (RunStatus.CRASHED, RunStatus.TIMEOUT)),
               None)
    if bad is None:
        return ""
    return (f"the incumbent {bad.status.value} on slot {result.slot}: {bad.reason} "
            f"(logs: {bad.stderr_path})")
