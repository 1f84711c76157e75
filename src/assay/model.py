"""The objects assay passes around: plain frozen dataclasses, no I/O.

Everything read out of the journal is a frozen snapshot: changing it changes nothing
stored. The experiment life cycle is a small state machine::

    proposed → queued → running → measured → kept | discarded | invalid | crashed | conflict
                                      ↑  │
                                      └──┘  (the decision asks for another block)

``invalid`` means the candidate could not be judged (metric missing, checks failed, patch
rejected, harness changed); ``crashed`` means the benchmark itself failed to run;
``conflict`` means the patch and the incumbent change the same lines (its note names the
files), found when it is queued or when a keep moved the incumbent under it.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

ParamValue = int | float | str | bool


class ExperimentState(enum.StrEnum):
    PROPOSED = "proposed"
    QUEUED = "queued"
    RUNNING = "running"
    MEASURED = "measured"
    KEPT = "kept"
    DISCARDED = "discarded"
    INVALID = "invalid"
    CRASHED = "crashed"
    CONFLICT = "conflict"  # the patch and the incumbent change the same lines

    def is_finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    {ExperimentState.KEPT, ExperimentState.DISCARDED, ExperimentState.INVALID,
     ExperimentState.CRASHED, ExperimentState.CONFLICT}
)


class RunStatus(enum.StrEnum):
    """Outcome of one benchmark execution."""

    OK = "ok"
    INVALID = "invalid"  # ran, but the metric is missing, repeated, non-finite or out of bounds
    CRASHED = "crashed"  # non-zero exit
    TIMEOUT = "timeout"  # killed at its time limit (the whole process group)
    HARNESS_CHANGED = "harness_changed"  # a protected path changed during the run
    SUSPICIOUS = "suspicious"  # parsed, but implausible: never kept on this run alone


class Role(enum.StrEnum):
    INCUMBENT = "A"
    CANDIDATE = "B"


class BlockKind(enum.StrEnum):
    COMPARE = "compare"  # incumbent vs candidate, interleaved
    AA = "aa"  # incumbent vs itself: measures the slot's noise
    CONFIRM = "confirm"  # a fresh block for a provisional keep (selection bias)
    RERUN = "rerun"  # re-measure outlier or suspicious pairs


class BlockState(enum.StrEnum):
    """A block's life in the journal: queued → running → done, or cancelled.

    A running block whose process died is put back to queued (its partial runs dropped).
    """

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class Verdict(enum.StrEnum):
    KEEP = "keep"
    DISCARD = "discard"
    INVALID = "invalid"
    CONTINUE = "continue"  # not decided: the decision names the next block it wants


class Direction(enum.StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


WRITTEN_DIGEST = "written_digest"  # Candidate.meta: the digest of the proposer's own text


def patch_digest(patch: str, params: Mapping[str, ParamValue]) -> str:
    """A stable id for what a candidate changes: identical diffs get identical digests."""
    body = patch.strip() + "\n" + json.dumps(dict(params), sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    """A proposed change: a patch against ``base_commit`` and/or parameter values."""

    base_commit: str
    patch: str = ""
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    hypothesis: str = ""
    proposer: str = ""
    sources: tuple[str, ...] = ()
    hypothesis_id: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)  # tokens, cost, sweep trial number

    @property
    def digest(self) -> str:
        return patch_digest(self.patch, self.params)

    @property
    def written_digest(self) -> str:
        """The digest of what the proposer wrote: its identity for duplicates, the same
        after its patch is merged onto a newer incumbent."""
        return str(self.meta.get(WRITTEN_DIGEST) or self.digest)

    def is_empty(self) -> bool:
        return not self.patch.strip() and not self.params


@dataclass(frozen=True)
class Incumbent:
    """The current best: a commit plus the parameter values applied on top of it."""

    commit: str
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    experiment_id: str | None = None

    def holds(self, params: Mapping[str, ParamValue]) -> bool:
        """Whether every value in ``params`` is already the incumbent's."""
        return all(self.params.get(k) == v for k, v in params.items())


@dataclass(frozen=True)
class Block:
    """A comparison unit dispatched to ONE slot.

    ``order`` is a string of roles, e.g. ``"ABBA"``: incumbent (A) and candidate (B) runs
    interleaved so slow drift cancels. For an A/A block both sides are the incumbent.
    ``block_id`` is deterministic, so a block submitted twice is recognised as the same one.
    """

    block_id: str
    experiment_id: str
    kind: BlockKind
    order: str
    incumbent: Incumbent
    candidate: Candidate | None  # None for an A/A block
    prefer_slot: str | None = None
    avoid_slot: str | None = None
    seq: int = 0  # position in the experiment's list of blocks
    platform: str = ""  # with [[platforms]]: the platform it must run on
    level: int = 0  # with [fidelity]: the index of the level both sides run at


@dataclass(frozen=True)
class RunResult:
    """One execution of the benchmark on one slot."""

    run_id: str
    block_id: str
    experiment_id: str
    role: Role
    index: int  # position within the block's order
    status: RunStatus
    metrics: Mapping[str, float]
    reason: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    stdout_path: str = ""
    stderr_path: str = ""
    slot: str = ""
    holdout: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockResult:
    """What a slot hands back for a block: its runs and whether the candidate is valid."""

    block_id: str
    experiment_id: str
    slot: str
    runs: tuple[RunResult, ...]
    checks_passed: bool | None = None  # None: no checks configured or not reached
    error: str = ""  # non-empty: the block could not be judged (patch, build, harness)
    error_kind: str = ""  # 'patch', 'build', 'checks_failed', 'compare', 'harness_changed',
    # 'tampered' (a step changed a tree not its own: assay.repo.treestate) ...
    wall_s: float = 0.0
    # unmeasured warm-up runs made before the block's measured runs: (role, wall seconds)
    warmups: tuple[tuple[str, float], ...] = ()
    build_s: float = 0.0  # seconds spent building in this block (0: the trees were warm)
    checks_runs: int = 0  # how many times this block ran the checks (0: already checked)
    checks_outcome: str = ""  # passed, flaky, failed, reused ('' when there are no checks)
    checks_detail: str = ""  # the failing tests' names, or the output's tail
    # trees found changed since the slot's last block (by nothing of this block), scrubbed
    # and restored before it: one sentence each, said by the loop
    restored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pair:
    """One A/B pair of the primary metric, measured back to back on one slot."""

    a: float
    b: float
    slot: str
    block_id: str
    kind: BlockKind = BlockKind.COMPARE


@dataclass(frozen=True)
class NextBlock:
    """What a decision wants measured next."""

    pairs: int
    kind: BlockKind = BlockKind.COMPARE
    other_slot: bool = False  # confirmation on another slot where there is one
    reason: str = ""
    order: str | None = None  # explicit run order ("ABBA", "BB" ...); None: ABBA-style

    def run_order(self) -> str:
        """The runs, in order: ABBA repeated (1 pair: AB, 2: ABBA, 3: ABBAAB), or ``order``."""
        if self.order:
            return self.order
        return "".join("AB" if i % 2 == 0 else "BA" for i in range(max(1, self.pairs)))


@dataclass(frozen=True)
class Decision:
    """A verdict with its evidence and its reason in words."""

    verdict: Verdict
    reason: str
    effect: float | None = None  # estimated improvement, as a fraction (0.03 = 3% better)
    lo: float | None = None  # interval on the effect
    hi: float | None = None
    pairs_used: int = 0
    runs_used: int = 0
    delta: float = 0.0
    next_block: NextBlock | None = None
    rule: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LevelResult:
    """A candidate's verdict at one fidelity level: the last decision made on its pairs at
    that level (``Decision.details["level"]``), with where it went from there.

    ``outcome``: ``promoted`` (cleared the level's screen, measured at the next level),
    ``stopped`` (did not clear it), ``kept`` / ``discarded`` (decided at the last level),
    ``measuring`` (no verdict at this level yet), or the experiment's final state when it
    ended otherwise (``invalid``, ``crashed``, ``conflict``).
    """

    experiment_id: str
    level: int
    outcome: str
    effect: float | None
    lo: float | None
    hi: float | None
    pairs: int
    delta: float


LEVEL = "level"  # Decision.details: the fidelity level the decision was made at
SCREEN = "screen"  # Decision.details at a level below the last: "promoted" or "stopped"


@dataclass(frozen=True)
class Experiment:
    """A candidate's life, as stored in the journal."""

    id: str
    seq: int
    state: ExperimentState
    candidate: Candidate
    created_at: float
    updated_at: float
    decision: Decision | None = None
    commit: str | None = None  # the commit on the run branch when kept
    note: str = ""  # the reason for invalid/crashed/conflict
    digest: str = ""
    # True when the note carries held-out results (a holdout regression): proposers, their
    # MCP tools and their context never see the note then, only that it was withheld.
    withheld: bool = False
    # A listing (a page of ``assay log``, the dashboard's rows) leaves the patch's text in the
    # journal: ``candidate.patch`` is then "" and ``patch_loaded`` False; ``patch_chars`` is
    # the stored patch's length either way.
    patch_chars: int = 0
    patch_loaded: bool = True

    @property
    def has_patch(self) -> bool:
        """Whether the candidate changes files (known also when the patch was not read)."""
        return bool(self.candidate.patch.strip()) if self.patch_loaded else self.patch_chars > 0


WITHHELD_NOTE = "discarded by a held-out check (its results are withheld from proposers)"


def for_proposer(e: Experiment) -> Experiment:
    """``e`` as a proposer may see it: a withheld note (held-out results) is replaced."""
    return replace(e, note=WITHHELD_NOTE) if e.withheld else e


@dataclass(frozen=True)
class Slot:
    """One place a block can run: a host share or one GPU."""

    name: str
    gpus: tuple[int, ...] = ()
    host: str = "localhost"
    platform: str = ""  # the [[platforms]] group it belongs to ('' when none is declared)
    env: tuple[tuple[str, str], ...] = ()  # set in its benchmark processes


@dataclass(frozen=True)
class Hypothesis:
    id: int
    text: str
    sources: tuple[str, ...]
    source_kind: str  # paper, fork, backend, profile, doc, person, proposer
    status: str  # open, testing, supported, refuted
    score: float = 0.0
    created_at: float = 0.0


@dataclass(frozen=True)
class BlockRow:
    """A block as stored in the journal (what was asked, where it ran, how it ended)."""

    id: str
    experiment_id: str
    seq: int
    kind: BlockKind
    order: str  # the run order, e.g. "ABBA"
    incumbent: Incumbent  # the incumbent it measures against
    state: BlockState
    created_at: float
    slot: str | None = None
    prefer_slot: str | None = None
    avoid_slot: str | None = None
    lease_owner: str | None = None
    lease_expires: float | None = None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    checks_passed: bool | None = None
    error: str = ""
    error_kind: str = ""
    wall_s: float | None = None
    build_s: float | None = None  # seconds spent building (0: the slot's trees were warm)
    checks_runs: int = 0  # checks runs on the candidate in this block (0: checked before)
    checks_outcome: str = ""  # passed, reused, flaky, failed ('' without checks)
    checks_detail: str = ""
    platform: str = ""  # with [[platforms]]: the platform it must run on
    noise: float | None = None  # its slot's pair noise when it was measured (weights pairs)
    level: int = 0  # with [fidelity]: the index of the level both sides ran at


@dataclass(frozen=True)
class IncumbentSample:
    """One good run of the incumbent's tree in a finished block (noise over time)."""

    block_id: str
    slot: str
    kind: BlockKind
    finished_at: float | None
    experiment_id: str
    value: float | None  # the metric's value (None when the run did not report it)


@dataclass(frozen=True)
class SlotRow:
    """A slot's record: where it is, its measured noise, whether it is quarantined."""

    name: str
    host: str
    gpus: tuple[int, ...]
    noise: float | None
    quarantined: bool
    reason: str
    updated_at: float


@dataclass(frozen=True)
class HookRow:
    """One firing of a completion hook (its key makes it run at most once to the end)."""

    key: str
    event: str
    experiment_id: str | None
    status: str  # pending, ok, failed, timeout
    exit_code: int | None
    output: str
    attempts: int
    created_at: float
    finished_at: float | None


@dataclass(frozen=True)
class EventRow:
    """One line of the run's story (``assay log --events``, the dashboard feed)."""

    id: int
    ts: float
    kind: str
    experiment_id: str | None
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


def as_pairs(runs: Sequence[RunResult], metric: str, slot: str, block_id: str,
             kind: BlockKind = BlockKind.COMPARE) -> list[Pair]:
    """Pair the k-th A run with the k-th B run of one block (ABBA gives two pairs)."""
    a = [r.metrics[metric] for r in sorted(runs, key=lambda r: r.index)
         if r.role is Role.INCUMBENT and r.status is RunStatus.OK and metric in r.metrics]
    b = [r.metrics[metric] for r in sorted(runs, key=lambda r: r.index)
         if r.role is Role.CANDIDATE and r.status is RunStatus.OK and metric in r.metrics]
    if not a and not any(r.role is Role.INCUMBENT for r in runs):
        # A candidate-only block (expensive mode): the A side comes from the slot's history.
        return [Pair(float("nan"), y, slot, block_id, kind) for y in b]
    return [Pair(x, y, slot, block_id, kind) for x, y in zip(a, b, strict=False)]


def decided_level(e: Experiment, blocks: Sequence[BlockRow]) -> int:
    """The fidelity level an experiment's figures are read at: the one its decision was made
    at (``details["level"]``: the last level for a kept one); without a decision, the level
    it is measured at (its latest block's). 0 without ``[fidelity]``."""
    d = e.decision
    if d is not None and LEVEL in d.details:
        return int(d.details[LEVEL])
    return max((b.level for b in blocks), default=0)


def decided_runs(e: Experiment, blocks: Sequence[BlockRow],
                 runs: Sequence[RunResult]) -> list[RunResult]:
    """The runs of ``e``'s blocks at the level its decision was made at
    (:func:`decided_level`): what every figure of one experiment (its guard medians, the
    exports' memory and metrics) is computed from, never runs of another level, which
    measure another quantity."""
    level = decided_level(e, blocks)
    ids = {b.id for b in blocks if b.level == level}
    return [r for r in runs if r.block_id in ids]
