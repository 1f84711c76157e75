"""An assay session of examples/gpt at a short budget, then its finalists at 300 s, then
karpathy's program beside the best of them: the whole H200 job of gpt_h200.md in one command.

    python benchmarks/karpathy/pipeline.py CONFIG --out DIR [--set NAME=VALUE ...]
        [--time-budget 30] [--budget 12] [--max-hours 0.2] [--top 1] [--karpathy PATH]

1. `DIR/repo`: a fresh git repository holding examples/gpt as committed, with
   `TIME_BUDGET` and each `--set` written into its `train.py`, and CONFIG (one of this
   folder's `*session.toml`) as its `assay.toml`; that commit is the session's base.
2. There: `python prepare.py`, then `assay run --budget B --max-hours H -v`.
3. Into DIR: `assay status`, `assay log` and `assay export jsonl` of the session.
4. `finalists.py run DIR/repo --top N --cache DIR/repo/.assay/cache/s0`: the session's
   finalists and its base at 300 s, starting from the session's compile cache.
5. With `--karpathy PATH`: karpathy's `train.py` at 300 s (empty cache), and the table of
   the best finalist beside it.

Every step appends to `DIR/pipeline.log` and touches `DIR/<step>.done` when it ends, so a
job watched from outside knows how far it got; what DIR gathers is small (logs, JSON, the
journal's export), the session's journal itself stays in `DIR/repo/.assay`. The process
exits 0 when the finalists' summary line says PASS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GPT = ROOT / "examples" / "gpt"
sys.path.insert(0, str(HERE))

from side_by_side import KNOB, rewrite  # noqa: E402


def base_repo(out: Path, config: Path, knobs: dict[str, str]) -> Path:
    """The session's repository: examples/gpt with ``knobs`` written in, committed."""
    repo = out / "repo"
    if repo.exists():
        raise SystemExit(f"{repo} exists: give a fresh --out (a session's repository is "
                         "never reused by this script; `assay run` there resumes it)")
    repo.mkdir(parents=True)
    for f in GPT.iterdir():
        if f.is_file() and f.name != "assay.toml":
            shutil.copy(f, repo / f.name)
    (repo / "train.py").write_text(rewrite((GPT / "train.py").read_text(), knobs))
    shutil.copy(config, repo / "assay.toml")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=assay", "-c", "user.email=assay@localhost", "commit", "-qm",
                  "examples/gpt: " + ", ".join(f"{k} = {v}" for k, v in knobs.items())]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="the session's assay.toml")
    ap.add_argument("--out", type=Path, required=True, help="a fresh folder for everything")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a knob of examples/gpt's train.py at the session's base")
    ap.add_argument("--time-budget", type=float, default=30.0, help="the session's runs, s")
    ap.add_argument("--budget", type=int, default=12, help="the session's experiments")
    ap.add_argument("--max-hours", type=float, default=0.2)
    ap.add_argument("--top", type=int, default=1, help="finalists besides the base")
    ap.add_argument("--karpathy", type=Path, help="karpathy/autoresearch's train.py")
    a = ap.parse_args(argv)
    if not a.config.is_file():
        raise SystemExit(f"{a.config}: no such config")
    if a.karpathy is not None and not a.karpathy.is_file():
        raise SystemExit(f"--karpathy {a.karpathy}: no such file")
    knobs = {"TIME_BUDGET": repr(float(a.time_budget))}
    for item in a.set:
        m = KNOB.match(item)
        if m is None:
            raise SystemExit(f"--set {item!r}: expected NAME=VALUE")
        knobs[m.group(1)] = m.group(2)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "pipeline.log", "a", encoding="utf-8")  # noqa: SIM115 - the whole run
    # `python` in the session's commands is this interpreter, whatever PATH had first
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                         os.environ.get("PYTHONPATH")])),
               PATH=os.pathsep.join(filter(None, [str(Path(sys.executable).parent),
                                                  os.environ.get("PATH")])))

    def step(name: str, cmd: list[str], cwd: Path, to: Path | None = None) -> int:
        start = time.monotonic()
        log.write(f"{time.strftime('%H:%M:%S')} {name}: {' '.join(cmd)} (in {cwd})\n")
        log.flush()
        with open(to or out / f"{name}.log", "w", encoding="utf-8") as fh:
            code = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh,
                                  stderr=subprocess.STDOUT, check=False).returncode
        log.write(f"{time.strftime('%H:%M:%S')} {name}: exit {code} after "
                  f"{time.monotonic() - start:.1f} s\n")
        log.flush()
        (out / f"{name}.done").touch()
        return code

    repo = base_repo(out, a.config, knobs)
    py = sys.executable
    if step("prepare", [py, "prepare.py"], repo):
        raise SystemExit(f"prepare.py failed: {out / 'prepare.log'}")
    assay = [py, "-m", "assay"]
    failed = step("session", [*assay, "run", "--budget", str(a.budget), "--max-hours",
                              str(a.max_hours), "-v"], repo)
    for what, args in (("status", ["status"]), ("log", ["log"]),
                       ("export", ["export", "jsonl"])):
        step(what, [*assay, *args], repo, out / f"{what}.txt")
    if failed:
        raise SystemExit(f"the session ended with an error: {out / 'session.log'}")
    caches = sorted((repo / ".assay" / "cache").glob("*/"))
    fin = [py, str(HERE / "finalists.py"), "run", str(repo), "--top", str(a.top),
           "--out", str(out / "finalists")]
    code = step("finalists", fin + (["--cache", str(caches[0])] if caches else []), ROOT)
    if a.karpathy is not None:
        k = out / "karpathy.json"
        step("karpathy", [py, str(HERE / "side_by_side.py"), "run", "karpathy", "--train",
                          str(a.karpathy.resolve()), "--out", str(k)], ROOT)
        best = out / "finalists" / "best.json"
        if best.exists() and k.exists():
            step("table", [py, str(HERE / "side_by_side.py"), "table", str(best), str(k)],
                 ROOT, out / "table.txt")
    log.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
