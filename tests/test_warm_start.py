"""Warm starts: each slot has its own compile cache, and a cold one is filled by an
unmeasured warm-up run, so the first measured run starts as fast as the later ones."""

from __future__ import annotations

import re
from pathlib import Path

from assay import api

from .conftest import BENCH, TinyFactory, git, patch_work

# A compile cache like TorchInductor's: keyed by the tree's path and source, filled on a
# miss by a slow "compile" (1.5 s), read on a hit.
CACHED = '''
import hashlib, os, pathlib, time
_t0 = time.monotonic()
_cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
_key = hashlib.sha256((os.getcwd() + pathlib.Path("work.py").read_text()).encode()).hexdigest()
_compiled = 0
if not (_cache / _key).exists():
    time.sleep(1.5)
    (_cache / _key).write_text("compiled")
    _compiled = 1
print(f"METRIC startup_s={time.monotonic() - _t0:.3f}")
print(f"METRIC compiled={_compiled}")
'''


def _startups(root: Path) -> list[int]:
    """Per measured run, 1 when it paid the compile (a cache miss), else 0 (not a timing)."""
    out = []
    for e in api.log(root):
        for r in api.show(e["id"], root)["runs"]:
            text = Path(r["stdout_path"]).read_text()
            out.append(int(re.search(r"compiled=(\d)", text).group(1)))  # type: ignore[union-attr]
    return out


def _target(tiny_target: TinyFactory, warm_up: str) -> Path:
    root = tiny_target(work=300_000, slots=1, budget=1, pairs=2,
                       extra='[proposer.queue]\npath = "patches"\n',
                       files={"bench.py": CACHED + BENCH})
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace(
        "[run]\n", f'[run]\ncompile_cache = ["TORCHINDUCTOR_CACHE_DIR"]\nwarm_up = "{warm_up}"\n'
        "verify = false\n"))  # a verification's runs, all warm, would be counted too
    git(root, "commit", "-qam", "warm starts")
    diff = patch_work(root, 290_000)
    (root / "patches").mkdir()
    (root / "patches" / "1.patch").write_text("# hypothesis: a little less work\n" + diff)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "patch")
    return root


def test_cold_cache_slows_the_first_runs_without_warm_up(tiny_target: TinyFactory) -> None:
    root = _target(tiny_target, "none")
    api.run(root, proposer="queue")
    starts = _startups(root)
    assert len(starts) == 4
    assert max(starts) == 1  # the first run in each tree compiled inside the measurement
    for tree in ("s0-a", "s0-b"):  # a cache folder per tree
        assert (root / ".assay" / "cache" / "s0" / tree / "torchinductor_cache_dir").is_dir()


def test_warm_up_runs_keep_compiles_out_of_the_measurements(tiny_target: TinyFactory) -> None:
    root = _target(tiny_target, "all")
    events: list[tuple[str, str]] = []
    api.run(root, proposer="queue", on_event=lambda k, m, e: events.append((k, m)))
    starts = _startups(root)
    assert len(starts) == 4
    assert max(starts) == 0, starts  # no measured run paid the 1.5 s compile
    warm = [m for k, m in events if k == "warm-up"]
    assert len(warm) == 2 and "incumbent" in warm[0] and "candidate" in warm[1], warm
    logs = list((root / ".assay" / "logs").rglob("warmup-*.out"))
    assert sorted(p.name for p in logs) == ["warmup-A.out", "warmup-B.out"]
    markers = list((root / ".assay" / "cache" / "s0").glob("warm-*"))
    assert len(markers) == 2
