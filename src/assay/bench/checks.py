"""Correctness checks: run once per tree content, and tell a flaky check from a real failure.

A tree's checks are remembered by the digest of what the tree holds (commit, patch,
parameters) in ``.assay/checks/``: a candidate measured in several blocks, on any slot, is
checked once. A failing check is run again once on the candidate and once on the
incumbent: failing twice on the candidate while passing on the incumbent is a real failure
(``checks_failed``); passing on the second try, or failing on the incumbent as well, makes
the check ``checks_flaky`` (its result does not depend on the candidate).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

_PATTERNS = (
    re.compile(r"^(?:FAILED|ERROR) (\S+::\S+)", re.MULTILINE),  # pytest -q / -rA summary
    re.compile(r"^(\S+::\S+) (?:FAILED|ERROR)", re.MULTILINE),  # pytest -v
    re.compile(r"^(?:FAIL|ERROR): (\S+ \([\w.]+\))", re.MULTILINE),  # unittest
    re.compile(r"^\s*\d+ - (\S+) \((?:Failed|SEGFAULT|Timeout|Subprocess aborted|"
               r"Exception|Not Run|Child aborted)", re.MULTILINE),  # ctest summary
    re.compile(r"^\s*--- FAIL: (\S+)", re.MULTILINE),  # go test
    re.compile(r"^test (\S+) \.\.\. FAILED", re.MULTILINE),  # cargo test
    re.compile(r"^\s*\[  FAILED  \] (\S+)", re.MULTILINE),  # googletest
)


def failing_tests(output: str, limit: int = 5) -> list[str]:
    """Names of the failing tests that a test runner printed (pytest, unittest, ctest ...)."""
    names: list[str] = []
    for pattern in _PATTERNS:
        for m in pattern.finditer(output):
            name = m.group(1).rstrip(",")
            if name not in names:
                names.append(name)
    return names[:limit]


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass(frozen=True)
class CheckRecord:
    outcome: str  # passed, flaky
    detail: str = ""
    at: float = 0.0


class CheckMemo:
    """Checks outcomes by tree content, kept on disk so every slot and session shares them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> CheckRecord | None:
        path = self._path(key)
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict) or raw.get("outcome") not in ("passed", "flaky"):
            return None
        return CheckRecord(str(raw["outcome"]), str(raw.get("detail", "")),
                           float(raw.get("at", 0.0)))

    def put(self, key: str, outcome: str, detail: str = "") -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self._path(key).with_suffix(".tmp")
        tmp.write_text(json.dumps({"outcome": outcome, "detail": detail, "at": time.time()}))
        tmp.replace(self._path(key))
