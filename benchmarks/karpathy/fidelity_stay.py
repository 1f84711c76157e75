"""One stay of the multi-fidelity session on a GPU machine that keeps nothing between stays.

    python benchmarks/karpathy/fidelity_stay.py [--out DIR] [--state FILE] [--seconds 540]
        [--work DIR] [--data DIR] [--config TOML] [--budget N] [--verify]
        [--detach | --collect] [--spool DIR]

Run from the repository root, with no network. In order, each step logged to
`OUT/stay.log` with its time (OUT is `--out`, or `$OUT`):

1. The session's repository in `--work` (default: a folder under the system's temporary
   folder): a fresh git repository holding examples/gpt (its `patches/` folder included)
   with `--config` (default `fidelity_session.toml`) as its `assay.toml`, committed with a
   fixed author, committer and date, so that every machine builds the same base commit.
   A repository left there by an earlier stay on the same machine is used as it is.
2. `python prepare.py` there: the corpus and tokenizer into `--data` (about a minute on
   an H200 machine; nothing when an earlier stay on the machine built them).
3. With `--state FILE` and a fresh repository: `assay import --state FILE`, the session as
   the last stay left it.
4. `assay run --max-hours H -v`, H the time left of `--seconds` (counted from this
   script's start) less what the steps after it need; `--verify`: `assay verify` instead
   (the final best against the base, paired). Past the limit it is interrupted (Ctrl-C:
   assay stops cleanly and measures the cut block again on resume).
5. Into OUT: `status.txt` (`assay status`), `log.txt` (`assay log`), `journal.jsonl`
   (`assay export jsonl`), `journal.sqlite` (a consistent copy of the journal),
   `session.log` (what the run printed), `state` (`assay export --state`: what the next
   stay imports), `best_train.py` (the `train.py` of the run branch's tip, the session's
   incumbent: what `side_by_side.py rounds --gpt-train` runs) and `stay.json` (the base
   commit, each step's exit code and seconds).

Exit status 0 when every step ended 0 (a run that stopped at its time limit included).
Between stays, `OUT/state` is what has to travel: copy it into the checkout the next stay
runs from (an untracked file travels with it) and name it with `--state`:

    python benchmarks/karpathy/fidelity_stay.py --seconds 520 [--state carried/state]

Each run of the session goes in assay's sandbox where the machine has one: the run sees a
private, empty `/tmp` and `$HOME`. So the corpus goes to `--data` (`GPT_CACHE_DIR`,
default `/var/tmp/assay-gpt`), which must lie outside both, and where this checkout does
(the `assay` package that `prepare.py` imports), its `src` folder is copied into `--data`
for the runs to import.

A call of 9 minutes holds one 300 s run at most (and a block of two 300 s runs not at
all). Where the machine stays held longer than one call (up to 30 minutes), `--detach`
starts the stay in a process session of its own, its results going to `--spool` (default
`/var/tmp/assay-fidelity-spool`), and returns at once; a later call's `--collect` copies
the spool into OUT and exits 0 when the stay has ended, 3 while it runs (`--seconds` then
counts the whole detached stay).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GPT = ROOT / "examples" / "gpt"
# the steps after the run: status, log, exports (seconds, generous: the journal is small)
AFTER_RUN_S = 45.0
# a run given less than this is not started
MIN_RUN_S = 60.0
# after Ctrl-C, how long assay gets to stop before it is killed
STOP_GRACE_S = 20.0
# every machine commits the base with the same identity and date: the same commit hash
FIXED_IDENTITY = {"GIT_AUTHOR_NAME": "assay", "GIT_AUTHOR_EMAIL": "assay@localhost",
                  "GIT_COMMITTER_NAME": "assay", "GIT_COMMITTER_EMAIL": "assay@localhost",
                  "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
                  "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def base_repo(repo: Path, config: Path) -> str:
    """examples/gpt and its patches with ``config`` as assay.toml, committed in ``repo``
    (which must not exist); the commit's hash, the same on every machine."""
    repo.mkdir(parents=True)
    for f in sorted(GPT.iterdir()):
        if f.is_file() and f.name != "assay.toml":
            shutil.copy(f, repo / f.name)
    shutil.copytree(GPT / "patches", repo / "patches")
    shutil.copy(config, repo / "assay.toml")
    env = dict(os.environ, **FIXED_IDENTITY)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["commit", "-qm", "examples/gpt: the multi-fidelity session's base"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return head(repo)


def private(path: Path) -> bool:
    """Whether a sandboxed run sees another ``path`` (under /tmp or $HOME, private there)."""
    home = os.environ.get("HOME", "")
    covers = [Path("/tmp"), *([Path(home)] if home and home != "/" else [])]
    resolved = path.resolve()
    return any(resolved == c.resolve() or c.resolve() in resolved.parents for c in covers)


def visible_src(data: Path) -> Path:
    """assay's ``src`` as a sandboxed run can import it: this checkout's, or a copy."""
    src = ROOT / "src"
    if not private(src):
        return src
    copy = data / "assay-src"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def head(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def run_hours(started: float, seconds: float, now: float) -> float:
    """The `--max-hours` that leaves the steps after the run their time (0: no run)."""
    left = seconds - (now - started) - AFTER_RUN_S
    return round(left / 3600, 4) if left >= MIN_RUN_S else 0.0


class Stay:
    """The steps of one stay, each logged and recorded."""

    def __init__(self, out: Path, env: dict[str, str]) -> None:
        self.out, self.env = out, env
        self.record: dict[str, Any] = {"steps": []}
        self.log = open(out / "stay.log", "a", encoding="utf-8")  # noqa: SIM115

    def note(self, text: str) -> None:
        self.log.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.log.flush()
        print(text, flush=True)

    def step(self, name: str, cmd: list[str], cwd: Path, to: Path | None = None,
             limit: float | None = None) -> int:
        """Run ``cmd``, its output to ``to`` (or `OUT/NAME.log`); past ``limit`` seconds it
        gets Ctrl-C, then is killed after STOP_GRACE_S."""
        start = time.monotonic()
        self.note(f"{name}: {' '.join(cmd)}")
        with open(to or self.out / f"{name}.log", "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=fh,
                                    stderr=subprocess.STDOUT)
            interrupted = False
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.note(f"{name}: past its {limit:.0f} s, interrupted")
                interrupted = True
                proc.send_signal(signal.SIGINT)
                try:
                    code = proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
        seconds = round(time.monotonic() - start, 1)
        self.note(f"{name}: exit {code} after {seconds} s")
        # assay's clean stop on Ctrl-C (130) is how a step past its limit should end
        ok = code == 0 or (interrupted and code == 130)
        self.record["steps"].append({"step": name, "exit": code, "seconds": seconds,
                                     "interrupted": interrupted, "ok": ok})
        return 0 if ok else code

    def finish(self) -> int:
        failed = [s["step"] for s in self.record["steps"] if not s["ok"]]
        self.record["failed"] = failed
        (self.out / "stay.json").write_text(json.dumps(self.record, indent=1))
        self.note("stay done" + (f"; failed: {', '.join(failed)}" if failed else ""))
        self.log.close()
        return 1 if failed else 0


def copy_journal(repo: Path, to: Path) -> bool:
    """A consistent copy of the session's journal (SQLite's backup, WAL included)."""
    src = repo / ".assay" / "journal.sqlite"
    if not src.exists():
        return False
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(to) as b:
        a.backup(b)
    return True


def incumbent_train(repo: Path) -> str | None:
    """train.py at the tip of the session's run branch (``assay/<name>``), if there is one."""
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/heads/assay/"],
                          cwd=repo, capture_output=True, text=True, check=False).stdout.split()
    if len(refs) != 1:
        return None
    shown = subprocess.run(["git", "show", f"{refs[0]}:train.py"], cwd=repo,
                           capture_output=True, text=True, check=False)
    return shown.stdout if shown.returncode == 0 else None


def detach(argv: list[str], spool: Path) -> int:
    """This stay again, in a process session of its own, its OUT the spool."""
    if spool.exists():
        shutil.rmtree(spool)
    spool.mkdir(parents=True)
    args = [w for w in argv if w != "--detach"]
    with open(spool / "detached.log", "w", encoding="utf-8") as fh:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args,
                                 "--out", str(spool)], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=os.getcwd())
    (spool / "pid").write_text(f"{proc.pid}\n")
    print(f"detached: pid {proc.pid}, results in {spool}; collect them with --collect")
    return 0


def collect(spool: Path, out: Path) -> int:
    """The spool's files into ``out``; 0 when the detached stay has ended, 3 while it runs."""
    if not (spool / "pid").is_file():
        raise SystemExit(f"--collect: no detached stay in {spool} (start one with --detach)")
    done = (spool / "stay.json").is_file()
    out.mkdir(parents=True, exist_ok=True)
    for f in spool.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    log = (spool / "stay.log").read_text() if (spool / "stay.log").exists() else ""
    print(log.rstrip().splitlines()[-1] if log.strip() else "(nothing logged yet)")
    print("the detached stay has ended" if done else "the detached stay is still running")
    return 0 if done else 3


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=os.environ.get("OUT"),
                    help="where the stay's results go (default: $OUT)")
    ap.add_argument("--state", type=Path, help="the state the last stay exported")
    ap.add_argument("--seconds", type=float, default=540.0,
                    help="the whole stay, from this script's start (default 540)")
    ap.add_argument("--work", type=Path,
                    default=Path(tempfile.gettempdir()) / "assay-fidelity-session",
                    help="the session's repository")
    ap.add_argument("--config", type=Path, default=HERE / "fidelity_session.toml")
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("GPT_CACHE_DIR", "/var/tmp/assay-gpt")),
                    help="the corpus and tokenizer (GPT_CACHE_DIR), outside /tmp and $HOME")
    ap.add_argument("--budget", type=int, help="experiments (default: the config's)")
    ap.add_argument("--verify", action="store_true",
                    help="run `assay verify` (the final best against the base) instead")
    ap.add_argument("--detach", action="store_true",
                    help="start the stay in a session of its own, results to --spool")
    ap.add_argument("--collect", action="store_true",
                    help="copy a detached stay's results from --spool into OUT")
    ap.add_argument("--spool", type=Path, default=Path("/var/tmp/assay-fidelity-spool"))
    a = ap.parse_args(argv)
    if a.out is None:
        raise SystemExit("no --out and no $OUT: name a folder for the stay's results")
    if a.collect:
        return collect(a.spool, a.out)
    if a.state is not None and not a.state.is_file():
        raise SystemExit(f"--state {a.state}: no such file (the `state` an earlier stay "
                         "wrote into its OUT)")
    if not a.config.is_file():
        raise SystemExit(f"--config {a.config}: no such file")
    if private(a.data):
        raise SystemExit(f"--data {a.data} (GPT_CACHE_DIR) lies under /tmp or $HOME, which a "
                         "sandboxed run sees private and empty: name a folder elsewhere, "
                         "e.g. /var/tmp/assay-gpt")
    if a.detach:
        return detach(sys.argv[1:] if argv is None else argv, a.spool.resolve())
    out, repo, data = a.out.resolve(), a.work.resolve(), a.data.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    # `python` in the session's commands is this interpreter, whatever PATH had first
    env = dict(os.environ, PYTHONUNBUFFERED="1", GPT_CACHE_DIR=str(data),
               PYTHONPATH=os.pathsep.join(filter(None, [str(visible_src(data)),
                                                         os.environ.get("PYTHONPATH")])),
               PATH=os.pathsep.join(filter(None, [str(Path(sys.executable).parent),
                                                  os.environ.get("PATH")])))
    stay = Stay(out, env)
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if private(Path(entry)):
            stay.note(f"warning: PYTHONPATH holds {entry}, under /tmp or $HOME: a sandboxed "
                      "run cannot import from it")
    py, assay = sys.executable, [sys.executable, "-m", "assay"]
    fresh = not repo.exists()
    if fresh:
        stay.record["base"] = base_repo(repo, a.config)
        stay.note(f"repository {repo}: base commit {stay.record['base']}")
    else:
        stay.record["base"] = subprocess.run(
            ["git", "rev-list", "--max-parents=0", "HEAD"], cwd=repo, check=True,
            capture_output=True, text=True).stdout.split()[0]
        stay.note(f"repository {repo} left by an earlier stay on this machine: used as it is"
                  + ("; --state not imported" if a.state else ""))
    if stay.step("prepare", [py, "prepare.py"], repo):
        return stay.finish()
    if (fresh and a.state is not None
            and stay.step("import", [*assay, "import", "--state", str(a.state.resolve())],
                          repo)):
        return stay.finish()
    if a.verify:
        limit = a.seconds - (time.monotonic() - started) - AFTER_RUN_S
        stay.step("verify", [*assay, "verify"], repo, out / "session.log", limit=limit)
    else:
        hours = run_hours(started, a.seconds, time.monotonic())
        if hours > 0:
            cmd = [*assay, "run", "--max-hours", str(hours), "-v"]
            cmd += ["--budget", str(a.budget)] if a.budget is not None else []
            # the hard stop, beyond the run's own: its limit and a little more
            stay.step("run", cmd, repo, out / "session.log", limit=hours * 3600 + 15)
        else:
            stay.note("run: not started, the stay's time is spent")
    for name, args in (("status", ["status"]), ("log", ["log"]),
                       ("export", ["export", "jsonl", "-o", str(out / "journal.jsonl")]),
                       ("state", ["export", "--state", str(out / "state")])):
        stay.step(name, [*assay, *args], repo, out / f"{name}.txt")
    if not copy_journal(repo, out / "journal.sqlite"):
        stay.note("no journal to copy")
    best = incumbent_train(repo)
    if best is None:
        stay.note("no single run branch assay/...: no best_train.py")
    else:
        (out / "best_train.py").write_text(best)
    return stay.finish()


if __name__ == "__main__":
    sys.exit(main())
