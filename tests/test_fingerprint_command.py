"""[env] fingerprint: a target's own command adds what only its interpreter knows (cuDNN,
the framework's CUDA, a corpus hash) to every session's fingerprint."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from assay import api
from assay.bench.fingerprint import extra_from_command

from .conftest import TinyFactory


def test_the_command_lines_join_the_session_fingerprint(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=100_000, budget=1, pairs=2, extra="""
        [env]
        fingerprint = "echo 'cudnn: 91900'; echo 'corpus_sha256: bbf2b6ee'; echo 'noise line'"
        """)
    api.run(root)
    db = sqlite3.connect(root / ".assay" / "journal.sqlite")
    (raw,) = db.execute("SELECT value FROM meta WHERE key = 'fingerprints'").fetchone()
    (entry,) = json.loads(raw)
    assert entry["extra"] == {"cudnn": "91900", "corpus_sha256": "bbf2b6ee"}


def test_a_failing_command_is_recorded_not_fatal(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    out = extra_from_command("echo 'torch: 2'; exit 3", tmp_path, env)
    assert list(out) == ["fingerprint_error"] and "exited 3" in out["fingerprint_error"]
    assert extra_from_command("sleep 5", tmp_path, env, timeout_s=0.5)["fingerprint_error"]


def test_gpt_example_declares_its_fingerprint_command() -> None:
    import assay.config.spec as config

    target = config.load(Path(__file__).resolve().parents[1] / "examples" / "gpt")
    assert target.env.fingerprint == "python prepare.py --fingerprint"
    assert target.run.compile_cache == ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    assert target.run.warm_up == "incumbent"
