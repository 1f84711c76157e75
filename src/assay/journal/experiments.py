"""The journal's experiments, their decisions, and the hypotheses they test."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from ..errors import JournalError
from ..model import WRITTEN_DIGEST, Candidate, Decision, Experiment, ExperimentState, Hypothesis
from .connection import Store
from .rows import columns, decision_dict, decision_of, dumps, experiment_of


class ExperimentStore(Store):
    """Experiments (queued, measured, decided), their decisions and hypotheses."""

    def next_seq(self) -> int:
        row = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM experiments").fetchone()
        return int(row[0]) + 1

    def add_experiment(self, cand: Candidate, state: ExperimentState = ExperimentState.QUEUED,
                       note: str = "") -> Experiment:
        now = time.time()
        with self.tx():
            seq = self.next_seq()
            exp_id = f"e{seq:04d}"
            self.conn.execute(
                "INSERT INTO experiments (id, seq, state, base_commit, patch, params, hypothesis,"
                " proposer, sources, hypothesis_id, meta, digest, created_at, updated_at, note)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (exp_id, seq, state.value, cand.base_commit, cand.patch, dumps(dict(cand.params)),
                 cand.hypothesis, cand.proposer, dumps(list(cand.sources)), cand.hypothesis_id,
                 dumps(dict(cand.meta)), cand.written_digest, now, now, note))
            calls = [int(c) for c in cand.meta.get("model_calls", ()) or ()]
            if calls:
                self.conn.executemany("UPDATE model_calls SET experiment_id = ? WHERE id = ?",
                                      [(exp_id, c) for c in calls])
            if cand.hypothesis_id is not None:
                self.conn.execute("UPDATE hypotheses SET status = 'testing' WHERE id = ? "
                                  "AND status = 'open'", (cand.hypothesis_id,))
        exp = self.experiment(exp_id)
        assert exp is not None
        return exp

    def set_state(self, exp_id: str, state: ExperimentState, note: str | None = None,
                  commit: str | None = None, withheld: bool | None = None) -> None:
        with self.tx():
            cur = self.conn.execute("SELECT state FROM experiments WHERE id = ?", (exp_id,))
            row = cur.fetchone()
            if row is None:
                raise JournalError(f"experiment {exp_id} is not in the journal")
            if ExperimentState(row[0]).is_finished() and row[0] != state.value:
                raise JournalError(f"experiment {exp_id} is already {row[0]}; "
                                   f"refusing to move it to {state.value}")
            self.conn.execute(
                "UPDATE experiments SET state = ?, updated_at = ?,"
                " note = COALESCE(?, note), commit_sha = COALESCE(?, commit_sha),"
                " withheld = COALESCE(?, withheld) WHERE id = ?",
                (state.value, time.time(), note, commit,
                 None if withheld is None else int(withheld), exp_id))

    def set_patch(self, exp_id: str, patch: str) -> None:
        """Replace the candidate's patch by the same change merged onto a newer incumbent
        (what its next blocks measure; its digest stays the proposer's)."""
        with self.tx():
            self.conn.execute("UPDATE experiments SET patch = ?, updated_at = ?,"
                              " meta = json_set(meta, ?, digest) WHERE id = ?",
                              (patch, time.time(), f"$.{WRITTEN_DIGEST}", exp_id))

    def set_decision(self, exp_id: str, d: Decision) -> None:
        with self.tx():
            self.conn.execute(
                "INSERT INTO decisions (experiment_id, verdict, reason, effect, lo, hi, pairs_used,"
                " runs_used, delta, rule, details, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (exp_id, d.verdict.value, d.reason, d.effect, d.lo, d.hi, d.pairs_used,
                 d.runs_used, d.delta, d.rule, dumps(dict(d.details)), time.time()))
            self.conn.execute("UPDATE experiments SET decision = ?, updated_at = ? WHERE id = ?",
                              (dumps(decision_dict(d)), time.time(), exp_id))

    def experiment(self, exp_id: str) -> Experiment | None:
        row = self.conn.execute(f"SELECT {columns(True)} FROM experiments WHERE id = ?",
                                (exp_id,)).fetchone()
        return experiment_of(row) if row else None

    def experiments(self, states: Sequence[ExperimentState] | None = None, *,
                    patches: bool = True) -> list[Experiment]:
        """Experiments in order (those in ``states``). ``patches=False``: a listing, without
        the patches' text (``Experiment.patch_loaded`` is False, ``patch_chars`` is set)."""
        cols = columns(patches)
        if states:
            marks = ",".join("?" * len(states))
            rows = self.conn.execute(f"SELECT {cols} FROM experiments WHERE state IN ({marks}) "
                                     "ORDER BY seq", [s.value for s in states])
        else:
            rows = self.conn.execute(f"SELECT {cols} FROM experiments ORDER BY seq")
        return [experiment_of(r) for r in rows]

    def count_experiments(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0])

    def last_seq(self) -> int:
        """The newest experiment's ``seq`` (0 when there is none): one index lookup."""
        return int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM experiments"
                                     ).fetchone()[0])


    def digests_after(self, seq: int) -> list[tuple[int, str]]:
        """(seq, digest) of the experiments after ``seq``, in order: read incrementally."""
        rows = self.conn.execute("SELECT seq, digest FROM experiments WHERE seq > ? ORDER BY seq",
                                 (seq,))
        return [(int(r[0]), str(r[1])) for r in rows]

    def neighbours(self, seq: int) -> tuple[str | None, str | None]:
        """The ids of the experiments just before and just after ``seq``."""
        prev = self.conn.execute("SELECT id FROM experiments WHERE seq < ? ORDER BY seq DESC "
                                 "LIMIT 1", (seq,)).fetchone()
        nxt = self.conn.execute("SELECT id FROM experiments WHERE seq > ? ORDER BY seq LIMIT 1",
                                (seq,)).fetchone()
        return (str(prev[0]) if prev else None, str(nxt[0]) if nxt else None)

    def find_digest(self, digest: str) -> str | None:
        row = self.conn.execute("SELECT id FROM experiments WHERE digest = ? ORDER BY seq LIMIT 1",
                                (digest,)).fetchone()
        return str(row[0]) if row else None

    def decisions(self, exp_id: str) -> list[Decision]:
        rows = self.conn.execute("SELECT * FROM decisions WHERE experiment_id = ? ORDER BY id",
                                 (exp_id,))
        return [decision_of(r) for r in rows]

    # -- hypotheses ----------------------------------------------------------------
    def add_hypothesis(self, text: str, sources: Sequence[str], source_kind: str,
                       score: float = 0.0) -> int:
        text = text.strip()
        with self.tx():
            row = self.conn.execute("SELECT id FROM hypotheses WHERE text = ?", (text,)).fetchone()
            if row:
                return int(row[0])
            cur = self.conn.execute(
                "INSERT INTO hypotheses (text, sources, source_kind, status, score, created_at)"
                " VALUES (?,?,?,?,?,?)",
                (text, dumps(list(sources)), source_kind, "open", score, time.time()))
            return int(cur.lastrowid or 0)

    def hypotheses(self, status: str | None = None) -> list[Hypothesis]:
        if status:
            rows = self.conn.execute("SELECT * FROM hypotheses WHERE status = ? "
                                     "ORDER BY score DESC, id", (status,))
        else:
            rows = self.conn.execute("SELECT * FROM hypotheses ORDER BY score DESC, id")
        return [Hypothesis(r["id"], r["text"], tuple(json.loads(r["sources"])), r["source_kind"],
                           r["status"], r["score"], r["created_at"]) for r in rows]

    def update_hypothesis(self, hid: int, text: str, sources: Sequence[str],
                          score: float) -> None:
        """New evidence for a stored hypothesis: its id and status stay, the rest moves.

        The text stays as it was where another hypothesis already holds the new one.
        """
        text = text.strip()
        with self.tx():
            clash = self.conn.execute("SELECT id FROM hypotheses WHERE text = ? AND id != ?",
                                      (text, hid)).fetchone()
            if clash:
                self.conn.execute("UPDATE hypotheses SET sources = ?, score = ? WHERE id = ?",
                                  (dumps(list(sources)), score, hid))
            else:
                self.conn.execute("UPDATE hypotheses SET text = ?, sources = ?, score = ? "
                                  "WHERE id = ?", (text, dumps(list(sources)), score, hid))

    def set_hypothesis_status(self, hid: int, status: str) -> None:
        with self.tx():
            self.conn.execute("UPDATE hypotheses SET status = ? WHERE id = ?", (status, hid))

