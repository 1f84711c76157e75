"""The journal's meta records: what a run keeps besides its experiments (the incumbent,
the run's name and base, the calibration and noise, sessions, the last stop, verifications,
finalizes, research counters), each stored as JSON under its key and read back typed
(:mod:`assay.records`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..model import Incumbent
from ..records import (
    CalibrationRecord,
    DeltaStep,
    FinalizeRecord,
    Fingerprint,
    KeepCheck,
    SessionRecord,
    StopRecord,
    Verification,
)
from .connection import Store
from .rows import dumps

STOP_KEY = "stop_rule"  # the last rule stop: {"kind": ..., "reason": ..., "session": ...}
FINALIZE_PREFIX = "finalize:"  # + the run's name: what its last finalize made
WAIVED_KEY = "finalize:waived"  # the review findings waived (assay finalize --waive)
FIDELITY_KEY = "fidelity"  # the [fidelity] the blocks were measured under (or "none")


def level_key(name: str, level: int) -> str:
    """The meta key of ``name`` at a fidelity level: ``name`` at level 0, ``name@i`` above."""
    return name if level == 0 else f"{name}@{level}"


class MetaStore(Store):
    """The meta records, each read and written typed; :meth:`get_meta` and
    :meth:`set_meta` are the JSON beneath them."""

    def set_meta(self, key: str, value: Any) -> None:
        with self.tx():
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # -- the run -------------------------------------------------------------------
    def incumbent(self) -> Incumbent | None:
        raw = self.get_meta("incumbent")
        if raw is None:
            return None
        return Incumbent(commit=raw["commit"], params=raw.get("params", {}),
                         experiment_id=raw.get("experiment_id"))

    def set_incumbent(self, inc: Incumbent) -> None:
        self.set_meta("incumbent", {"commit": inc.commit, "params": dict(inc.params),
                                    "experiment_id": inc.experiment_id})

    def run_name(self) -> str | None:
        """The run's name (its branch is ``assay/<name>``); None before a run began."""
        raw = self.get_meta("run_name")
        return None if raw is None else str(raw)

    def set_run_name(self, name: str) -> None:
        self.set_meta("run_name", name)

    def base_commit(self) -> str | None:
        """The commit the run started from (the baseline); None before a run began."""
        raw = self.get_meta("base_commit")
        return None if raw is None else str(raw)

    def set_base_commit(self, commit: str) -> None:
        self.set_meta("base_commit", commit)

    def sessions(self) -> list[SessionRecord]:
        """Every session of the run, oldest first."""
        return [SessionRecord.from_dict(s) for s in self.get_meta("sessions") or []
                if isinstance(s, dict)]

    def set_sessions(self, sessions: Iterable[SessionRecord]) -> None:
        self.set_meta("sessions", [s.as_dict() for s in sessions])

    def stop_rule(self) -> StopRecord | None:
        """The stop rule that ended the last run (None: it ended otherwise, or went on)."""
        raw = self.get_meta(STOP_KEY)
        return StopRecord.from_dict(raw) if raw else None

    def set_stop_rule(self, stop: StopRecord | None) -> None:
        self.set_meta(STOP_KEY, None if stop is None else stop.as_dict())

    def unconfined(self) -> bool:
        """Whether a session ran the trees' commands without a sandbox."""
        return bool(self.get_meta("unconfined"))

    def set_unconfined(self) -> None:
        self.set_meta("unconfined", True)

    def fidelity_setup(self) -> dict[str, Any] | str | None:
        """The ``[fidelity]`` the journal's blocks were measured under
        (:func:`assay.config.fidelity.setup_record`); None in a journal older than the
        record, or one no session ran in."""
        raw = self.get_meta(FIDELITY_KEY)
        return raw if isinstance(raw, (dict, str)) else None

    def set_fidelity_setup(self, setup: dict[str, Any] | str) -> None:
        self.set_meta(FIDELITY_KEY, setup)

    def fingerprints(self) -> list[tuple[str, Fingerprint]]:
        """(session, the machine and software it ran on), one per session, as stored."""
        return [(str(e.get("session", "")), Fingerprint.from_dict(e))
                for e in self.get_meta("fingerprints", []) or [] if isinstance(e, dict)]

    def set_fingerprints(self, entries: Iterable[tuple[str, Fingerprint]]) -> None:
        self.set_meta("fingerprints", [{"session": s, **fp.as_dict()} for s, fp in entries])

    # -- noise ---------------------------------------------------------------------
    # With [fidelity], each level has its own noise: level 0 under the keys a journal
    # without levels uses (so an older journal reads as level 0), level i under "key@i".
    def calibration(self, level: int = 0) -> CalibrationRecord | None:
        """The run's noise at ``level`` as last measured (None before its calibration)."""
        raw = self.get_meta(level_key("calibration", level))
        return CalibrationRecord.from_dict(raw) if isinstance(raw, dict) else None

    def set_calibration(self, cal: CalibrationRecord, level: int = 0) -> None:
        self.set_meta(level_key("calibration", level), cal.as_dict())

    def calibrations(self) -> dict[int, CalibrationRecord]:
        """Every level's calibration (level 0 only without [fidelity]), by level."""
        out: dict[int, CalibrationRecord] = {}
        for (key,) in self.conn.execute(
                "SELECT key FROM meta WHERE key = 'calibration' OR key LIKE 'calibration@%'"):
            level = int(key.partition("@")[2] or 0)
            cal = self.calibration(level)
            if cal is not None:
                out[level] = cal
        return dict(sorted(out.items()))

    def noise_samples(self, level: int = 0) -> dict[str, list[float]]:
        """Per slot: the latest noise samples behind its estimate."""
        return {str(s): [float(v) for v in vs]
                for s, vs in (self.get_meta(level_key("noise_samples", level)) or {}).items()}

    def set_noise_samples(self, samples: Mapping[str, Sequence[float]], level: int = 0) -> None:
        self.set_meta(level_key("noise_samples", level),
                      {s: list(v) for s, v in samples.items()})

    def noise_recent(self, level: int = 0) -> list[tuple[str, float]]:
        """The latest noise samples of every slot, (slot, sample), oldest first."""
        return [(str(s), float(v))
                for s, v in self.get_meta(level_key("noise_recent", level)) or []]

    def set_noise_recent(self, recent: Iterable[tuple[str, float]], level: int = 0) -> None:
        self.set_meta(level_key("noise_recent", level), [[s, v] for s, v in recent])

    def delta_steps(self, level: int = 0) -> list[DeltaStep]:
        """Every move of the effective δ, oldest first."""
        return [DeltaStep.from_dict(s) for s in self.get_meta(level_key("delta_steps", level))
                or [] if isinstance(s, dict)]

    def set_delta_steps(self, steps: Iterable[DeltaStep], level: int = 0) -> None:
        self.set_meta(level_key("delta_steps", level), [s.as_dict() for s in steps])

    # -- after the run -------------------------------------------------------------
    def verification(self) -> Verification | None:
        """The last verification of the run (None when there is none)."""
        raw = self.get_meta("verification")
        return Verification.from_dict(raw) if isinstance(raw, dict) else None

    def set_verification(self, v: Verification) -> None:
        self.set_meta("verification", v.as_dict())

    def keep_checks(self) -> list[KeepCheck]:
        """The last ``assay verify --per-keep``: each keep measured alone."""
        return [KeepCheck.from_dict(c) for c in self.get_meta("per_keep") or []
                if isinstance(c, dict)]

    def set_keep_checks(self, checks: Iterable[KeepCheck]) -> None:
        self.set_meta("per_keep", [c.as_dict() for c in checks])

    def finalized(self, run: str) -> FinalizeRecord | None:
        """What the last finalize of ``run`` made (None: none yet)."""
        raw = self.get_meta(FINALIZE_PREFIX + run)
        return FinalizeRecord.from_dict(raw) if isinstance(raw, dict) else None

    def set_finalized(self, run: str, record: FinalizeRecord) -> None:
        self.set_meta(FINALIZE_PREFIX + run, record.as_dict())

    def waived(self) -> set[str]:
        """The review findings waived so far."""
        return {str(f) for f in self.get_meta(WAIVED_KEY, []) or []}

    def set_waived(self, findings: Iterable[str]) -> None:
        self.set_meta(WAIVED_KEY, sorted(findings))

    # -- research ------------------------------------------------------------------
    def research_wave(self) -> int:
        """How many experiments were decided when the last research wave began."""
        return int(self.get_meta("research.wave", 0))

    def set_research_wave(self, decided: int) -> None:
        self.set_meta("research.wave", decided)

    def research_keys(self) -> dict[str, int]:
        """Each research hypothesis's key -> its id in the journal."""
        return {str(k): int(v) for k, v in (self.get_meta("research.keys", {}) or {}).items()}

    def set_research_keys(self, keys: Mapping[str, int]) -> None:
        self.set_meta("research.keys", dict(keys))
