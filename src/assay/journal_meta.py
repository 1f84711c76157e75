"""The journal's meta records: what a run keeps besides its experiments (the incumbent,
the calibration, the run's name and base, ...), each stored as JSON under its key."""

from __future__ import annotations

import json
from typing import Any

from .journal_connection import Store
from .journal_rows import dumps
from .model import Incumbent


class MetaStore(Store):
    """The meta records, read and written by name."""

    def set_meta(self, key: str, value: Any) -> None:
        with self.tx():
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def incumbent(self) -> Incumbent | None:
        raw = self.get_meta("incumbent")
        if raw is None:
            return None
        return Incumbent(commit=raw["commit"], params=raw.get("params", {}),
                         experiment_id=raw.get("experiment_id"))

    def set_incumbent(self, inc: Incumbent) -> None:
        self.set_meta("incumbent", {"commit": inc.commit, "params": dict(inc.params),
                                    "experiment_id": inc.experiment_id})

