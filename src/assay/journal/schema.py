"""The journal's schema: the named migrations that build it, applied in order and each
recorded in the ``migrations`` table."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from . import seal

KEYED = "0009_keyed_seals"
SEALED = "0004_withheld_and_seals"

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE experiments (
        id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, state TEXT NOT NULL,
        base_commit TEXT NOT NULL, patch TEXT NOT NULL, params TEXT NOT NULL,
        hypothesis TEXT NOT NULL, proposer TEXT NOT NULL, sources TEXT NOT NULL,
        hypothesis_id INTEGER, meta TEXT NOT NULL, digest TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        decision TEXT, commit_sha TEXT, note TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX experiments_digest ON experiments(digest);
    CREATE TABLE blocks (
        id TEXT PRIMARY KEY, experiment_id TEXT NOT NULL,
        seq INTEGER NOT NULL, kind TEXT NOT NULL, run_order TEXT NOT NULL,
        inc_commit TEXT NOT NULL, inc_params TEXT NOT NULL,
        state TEXT NOT NULL, slot TEXT, prefer_slot TEXT, avoid_slot TEXT,
        lease_owner TEXT, lease_expires REAL, attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL, started_at REAL, finished_at REAL,
        checks_passed INTEGER, error TEXT NOT NULL DEFAULT '', error_kind TEXT NOT NULL DEFAULT '',
        wall_s REAL
    );
    CREATE INDEX blocks_state ON blocks(state);
    CREATE TABLE runs (
        id TEXT PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks(id),
        experiment_id TEXT NOT NULL, role TEXT NOT NULL, idx INTEGER NOT NULL,
        status TEXT NOT NULL, metrics TEXT NOT NULL, holdout TEXT NOT NULL,
        reason TEXT NOT NULL, exit_code INTEGER, wall_s REAL NOT NULL,
        stdout_path TEXT NOT NULL, stderr_path TEXT NOT NULL, worker TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX runs_experiment ON runs(experiment_id);
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, experiment_id TEXT NOT NULL,
        verdict TEXT NOT NULL, reason TEXT NOT NULL, effect REAL, lo REAL, hi REAL,
        pairs_used INTEGER NOT NULL, runs_used INTEGER NOT NULL, delta REAL NOT NULL,
        rule TEXT NOT NULL, details TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE hypotheses (
        id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL UNIQUE,
        sources TEXT NOT NULL, source_kind TEXT NOT NULL, status TEXT NOT NULL,
        score REAL NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE workers (
        name TEXT PRIMARY KEY, host TEXT NOT NULL, gpus TEXT NOT NULL,
        noise REAL, quarantined INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, kind TEXT NOT NULL,
        experiment_id TEXT, message TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE TABLE hooks (
        key TEXT PRIMARY KEY, event TEXT NOT NULL, experiment_id TEXT,
        status TEXT NOT NULL, exit_code INTEGER, output TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, finished_at REAL
    );
    """),
    ("0002_lookup_indexes", """
    CREATE INDEX IF NOT EXISTS blocks_experiment ON blocks(experiment_id, seq);
    CREATE INDEX IF NOT EXISTS decisions_experiment ON decisions(experiment_id, id);
    CREATE INDEX IF NOT EXISTS runs_block ON runs(block_id, idx);
    CREATE INDEX IF NOT EXISTS experiments_state ON experiments(state, seq);
    CREATE INDEX IF NOT EXISTS experiments_hypothesis ON experiments(hypothesis_id);
    CREATE INDEX IF NOT EXISTS hypotheses_status ON hypotheses(status);
    CREATE INDEX IF NOT EXISTS events_experiment ON events(experiment_id)
    """),
    # One word per idea: a place a block runs is a slot (it was also called a worker).
    ("0003_slot_names", """
    ALTER TABLE workers RENAME TO slots;
    ALTER TABLE runs RENAME COLUMN worker TO slot
    """),
    ("0004_block_build_checks", """
    ALTER TABLE blocks ADD COLUMN build_s REAL;
    ALTER TABLE blocks ADD COLUMN checks_runs INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE blocks ADD COLUMN checks_outcome TEXT NOT NULL DEFAULT '';
    ALTER TABLE blocks ADD COLUMN checks_detail TEXT NOT NULL DEFAULT ''
    """),
]

MIGRATIONS.append(("0004_withheld_and_seals",
                   "ALTER TABLE experiments ADD COLUMN withheld INTEGER NOT NULL DEFAULT 0;\n"
                   + seal.migration_sql()))
# [[platforms]]: the platform a block must run on ('' when none is declared).
MIGRATIONS.append(("0005_block_platform",
                   "ALTER TABLE blocks ADD COLUMN platform TEXT NOT NULL DEFAULT ''"))
MIGRATIONS.append(("0006_updated_index", """
    CREATE INDEX IF NOT EXISTS experiments_updated ON experiments(updated_at);
    CREATE INDEX IF NOT EXISTS blocks_finished ON blocks(finished_at)

    """))
# A slot's latest incumbent runs (the expensive rule's history, on every decision): newest
# first through the index instead of every run of the journal.
MIGRATIONS.append(("0007_runs_slot_index",
                   "CREATE INDEX IF NOT EXISTS runs_slot ON runs(slot, created_at)"))
# Each block's noise (the weight of its pairs) in a column of its own: it was one meta entry
# holding every block of the journal, read and rewritten after every block.
MIGRATIONS.append(("0008_block_noise", """
    ALTER TABLE blocks ADD COLUMN noise REAL;
    UPDATE blocks SET noise = (SELECT j.value FROM meta m, json_each(m.value) j
                               WHERE m.key = 'block_noise' AND j.key = blocks.id)
     WHERE id IN (SELECT j.key FROM meta m, json_each(m.value) j WHERE m.key = 'block_noise');
    DELETE FROM meta WHERE key = 'block_noise'
    """))

# Seals keyed with the journal's own secret (seal.py); every row is sealed again with it
MIGRATIONS.append((KEYED, seal.reseal_sql()))
# Every model call a proposer made (tokens by kind, dollars if priced; NULL = unknown), the
# experiment it became (NULL until it is recorded, or for a call that gave no candidate).
MIGRATIONS.append(("0010_model_calls", """
    CREATE TABLE model_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, session TEXT NOT NULL,
        call TEXT NOT NULL, model TEXT NOT NULL, experiment_id TEXT,
        tokens_in INTEGER, tokens_out INTEGER, tokens_cached INTEGER NOT NULL DEFAULT 0,
        tokens_cache_write INTEGER NOT NULL DEFAULT 0, cost_usd REAL,
        priced_by TEXT NOT NULL, estimated INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX model_calls_experiment ON model_calls(experiment_id);
    CREATE INDEX model_calls_session ON model_calls(session)
    """))

# [fidelity]: the level (an index into [fidelity] levels) both sides of a block run at
MIGRATIONS.append(("0011_fidelity_levels",
                   "ALTER TABLE blocks ADD COLUMN level INTEGER NOT NULL DEFAULT 0"))

MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
)


def statements(sql: str) -> Iterator[str]:
    """The complete statements of a script (a trigger's body holds ';' of its own)."""
    buf = ""
    for piece in sql.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                yield buf
            buf = ""
    if buf.strip(" \n;"):
        yield buf


