"""The red-team kit: a fresh repository for each attack, a real ``assay run``, and what the
user then sees.

:func:`make_repo` makes the attack's git repository: a small bench like the quickstart's
(``work.py`` the editable code, ``bench.py`` and ``checks.py`` protected), the attack's
patches committed under ``patches/`` for the ``queue`` proposer. :func:`run_attack` runs
``assay run`` there as a subprocess (or the attack's own driver), then ``assay status``,
``log``, ``show`` and ``export`` as a person reads them, and hands the whole
:class:`Outcome` to the attack's judge, which answers a :class:`Verdict`: ``blocked: how``
or ``NOT BLOCKED: what happened``.

Two settings of the bench: ``scripted`` (the tests: the speed printed is computed from the
work done, times a bounded random jitter of +-0.5%, so a decision does not depend on the
machine's load) and ``timed`` (``benchmarks/red_team.py``: the CPU time of the work is
measured, as the quickstart's bench does). The sabotage attacks all double the work an
incumbent run does, or halve what it reports, which halves its speed in both settings.

Attack code runs through :func:`guarded`: it prints ``REDTEAM-RAN <attack>`` first and
fails quietly when a defence stops it (a blocked candidate runs on as an ordinary one), so
a verdict of "blocked" never comes from an attack that did not run.
"""

from __future__ import annotations

import contextlib
import json
import os
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

# The tests: two pairs decide (the scripted values make every effect here exact); with two
# slots, an A/A block first.
DECISION_SCRIPTED = """\
[decision]
rule = "fixed"
pairs_per_block = 2
max_pairs = 2
aa_blocks = {aa_blocks}
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
        """The decision table; with two slots or more, an A/A block makes every slot's
        trees before the first candidate runs."""
        if not self.scripted:
            return DECISION_TIMED
        return DECISION_SCRIPTED.format(aa_blocks=1 if self.slots > 1 else 0)


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
            outcome.notes["agent"] = attack.proposer == "agent"
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
