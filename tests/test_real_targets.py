"""A real library, end to end: mistune's sdist as a pi-autoresearch project, run unattended.

The sdist comes from PyPI at run time (``pip download --no-binary :all:``) and is cached
outside the repository; the metric is scripted from the source (``--scripted``), so the
decisions do not depend on how busy the machine is.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "real_targets.py"


def test_mistune_end_to_end(tmp_path: Path, capsys: object) -> None:
    spec = importlib.util.spec_from_file_location("real_targets", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["real_targets"] = mod
    spec.loader.exec_module(mod)
    out = tmp_path / "outcome.json"
    code = mod.main(["--scripted", "--python-only", "--json", str(out)])
    [result] = json.loads(out.read_text())
    assert result["init"] == "exit 0, layout pi-autoresearch", result
    assert result["decisions"] == {"a comment only (no-op)": "discarded",
                                   "twice the busy loop (slower)": "discarded",
                                   "remove the busy loop (faster)": "kept"}, result
    assert set(result["checks_runs"].values()) == {1}, result  # once per candidate
    assert all(b == 0.0 for late in result["later_build_s"].values() for b in late), result
    assert code == 0 and result["ok"], result["problems"]
