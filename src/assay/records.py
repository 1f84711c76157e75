"""The records a journal keeps besides its experiments (its meta records), typed.

Each is stored as JSON under a key of the ``meta`` table (:mod:`assay.journal.meta`); the
JSON is the one older journals hold, so they read as before. ``as_dict`` gives that JSON,
``from_dict`` reads it (keys it does not know are left out; keys it lacks take their
defaults, where the record has them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# The CPU flags worth a glance when two machines disagree (all flags are stored).
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
             "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2", "neon")


@dataclass(frozen=True)
class CalibrationRecord:
    """The noise a run measured: per-slot and pooled, the δ in force, the slots set aside;
    written when the start-up A/A blocks are in, then after every measured block."""

    noise: dict[str, float] = field(default_factory=dict)  # per slot: its pair noise
    pooled: float | None = None  # the pooled pair noise
    delta: float | None = None  # the effective δ
    quarantined: dict[str, str] = field(default_factory=dict)  # slot -> why
    message: str = ""  # the words that say it
    samples: dict[str, int] = field(default_factory=dict)  # per slot: samples behind it
    baseline: float | None = None  # the base commit's median over the calibration runs
    start: dict[str, float] | None = None  # the pooled noise and δ at start-up
    regime: dict[str, Any] | None = None  # the noise regime (stats.regime's meta form)
    level: int = 0  # with [fidelity]: the level it was measured at (0 in older journals)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CalibrationRecord:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class DeltaStep:
    """One move of the effective δ, after the block that moved it (``cal``: calibration)."""

    block: str
    slot: str
    old: float | None
    new: float | None
    why: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeltaStep:
        return cls(block=str(raw.get("block", "")), slot=str(raw.get("slot", "")),
                   old=raw.get("old"), new=raw.get("new"),
                   why=str(raw.get("why", "")))


@dataclass(frozen=True)
class SessionRecord:
    """One ``assay run`` of the journal: where it started, and when it ended (None while it
    runs, or when it was interrupted)."""

    n: int
    name: str
    started: float
    user_head: str  # the user's HEAD when it started
    incumbent: str  # the incumbent's commit when it started
    experiments_before: int = 0  # its budget counts the experiments after these
    ended: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SessionRecord:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class StopRecord:
    """The stop rule that ended the last run (``kind``: cap, discards or target)."""

    kind: str
    reason: str
    session: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StopRecord:
        return cls(kind=str(raw.get("kind")), reason=str(raw.get("reason", "?")),
                   session=str(raw.get("session", "")))


@dataclass(frozen=True)
class Verification:
    """One paired measurement of the final best (B) against the baseline (A)."""

    base: str  # commit
    final: str  # commit (the incumbent when it was measured)
    state: str  # the comparison's verdict: kept (distinguishably better than δ) / discarded ...
    effect: float | None  # relative improvement, positive = better
    lo: float | None  # its two-sided confidence interval
    hi: float | None
    pairs: int
    runs: int
    reason: str
    compounded: float | None  # the kept effects compounded: prod(1 + e) - 1
    kept: int  # how many kept changes compound
    at: float  # when it was measured (epoch seconds)
    journal: str  # the comparison's own journal
    chain: dict[str, Any] | None = None  # the chain measured together (assay.measure.chain)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Verification:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class KeepCheck:
    """One keep measured alone against its parent (the incumbent it was kept over)."""

    id: str
    parent: str  # commit
    commit: str
    kept_effect: float | None  # the effect it was kept with
    state: str  # the comparison's verdict
    effect: float | None
    lo: float | None
    hi: float | None
    pairs: int
    reason: str
    journal: str

    @property
    def reproduced(self) -> bool:
        """Whether the keep alone is distinguishably better than its parent."""
        return self.lo is not None and self.lo > 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"reproduced": self.reproduced}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> KeepCheck:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})

    def words(self) -> str:
        def p(x: float | None) -> str:
            return "-" if x is None else f"{x:+.2%}"

        verdict = "reproduced" if self.reproduced else (
            "not reproduced: the interval contains zero" if self.lo is not None and
            self.hi is not None and self.lo <= 0.0 <= self.hi else f"not reproduced: {self.state}")
        return (f"{self.id} alone against its parent {self.parent[:12]}: {p(self.effect)} "
                f"[{p(self.lo)}, {p(self.hi)}] over {self.pairs} pairs (kept at "
                f"{p(self.kept_effect)}): {verdict}")


@dataclass(frozen=True)
class FinalizedGroup:
    """One group of kept changes as a finalize left it (its branch: None when not made)."""

    slug: str = ""
    branch: str | None = None
    experiments: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    reason: str = ""
    status: str = ""
    alone: dict[str, Any] | None = None  # the group alone on the merge-base, measured
    without: dict[str, Any] | None = None  # the final tree without the group, measured

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FinalizedGroup:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class FinalizeRecord:
    """What the last ``assay finalize`` of a run made: its groups and their branches."""

    base: str
    final: str
    at: float
    notes: list[str]
    groups: list[FinalizedGroup]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FinalizeRecord:
        return cls(base=str(raw.get("base", "")), final=str(raw.get("final", "")),
                   at=float(raw.get("at", 0.0)), notes=list(raw.get("notes", [])),
                   groups=[FinalizedGroup.from_dict(g) for g in raw.get("groups", [])
                           if isinstance(g, dict)])


@dataclass(frozen=True)
class Fingerprint:
    """The machine and software a session measured on (:mod:`assay.bench.fingerprint` takes it)."""

    cpu: str = ""
    cpu_flags: tuple[str, ...] = ()
    cores: int = 0
    gpus: tuple[str, ...] = ()
    driver: str = ""
    cuda: str = ""  # the highest CUDA version the driver supports
    cuda_toolkit: str = ""  # nvcc's release
    compilers: Mapping[str, str] = field(default_factory=dict)
    python: str = ""
    os: str = ""
    packages: Mapping[str, str] = field(default_factory=dict)
    commit: str = ""
    config_hash: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)
    taken_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cpu_flags"] = list(self.cpu_flags)
        out["gpus"] = list(self.gpus)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Fingerprint:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in raw.items() if k in known}
        data["cpu_flags"] = tuple(data.get("cpu_flags", ()))
        data["gpus"] = tuple(data.get("gpus", ()))
        return cls(**data)

    def key_flags(self) -> list[str]:
        have = set(self.cpu_flags)
        return [f for f in KEY_FLAGS if f in have]

    def lines(self) -> list[str]:
        """Human-readable lines, one per aspect; empty aspects are left out."""
        out = [f"CPU: {self.cpu or 'unknown'} ({self.cores} cores"
               + (f"; {' '.join(self.key_flags())}" if self.key_flags() else "") + ")"]
        if self.gpus:
            gpu = ", ".join(self.gpus)
            if self.driver:
                gpu += f"; driver {self.driver}"
            if self.cuda:
                gpu += f"; CUDA {self.cuda}"
            out.append(f"GPU: {gpu}")
        if self.cuda_toolkit:
            out.append(f"CUDA toolkit: {self.cuda_toolkit}")
        if self.compilers:
            out.append("compilers: " + "; ".join(f"{k}: {v}" for k, v in self.compilers.items()))
        out.append(f"Python {self.python} on {self.os}")
        if self.packages:
            out.append("packages: " + ", ".join(f"{k} {v}" for k, v in self.packages.items()))
        if self.extra:
            out.append("also: " + ", ".join(f"{k} {v}" for k, v in self.extra.items()))
        out.append(f"commit {self.commit[:12] or '-'}, "
                   f"config sha256 {self.config_hash[:12] or '-'}")
        return out

    def summary(self) -> str:
        """One line: CPU, GPU, Python."""
        parts = [self.cpu or "unknown CPU"]
        if self.gpus:
            parts.append(", ".join(self.gpus) + (f" (CUDA {self.cuda})" if self.cuda else ""))
        parts.append(f"Python {self.python}")
        return "; ".join(parts)
