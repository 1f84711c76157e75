"""The sandbox's promises, one adversarial property per test, each with a real process.

Every test runs a command in a real slot tree of a real target (a git repository with its
``.assay`` folder, two worktrees, a journal-like file), through :func:`assay.bench.process.run`
with the spec :func:`assay.bench.contain.spec_for` gives, exactly as a benchmark runs.
"""

from __future__ import annotations

import http.server
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from assay import api, sandbox
from assay.bench import contain, process
from assay.config.spec import Target
from assay.errors import ConfigError
from assay.repo.workspace import Workspace

from .conftest import TinyFactory


@dataclass
class Slots:
    target: Target
    a: Path  # the incumbent's tree
    b: Path  # the candidate's tree, where the commands run
    logs: Path

    def run(self, cmd: str, *, env: dict[str, str] | None = None, holdout: bool = False,
            timeout_s: float = 60.0) -> process.ProcResult:
        env = env if env is not None else process.scrubbed_env(self.target.env)
        spec = contain.spec_for(self.target, self.b, env, holdout=holdout)
        assert spec is not None
        return process.run(cmd, cwd=self.b, env=env, timeout_s=timeout_s,
                           stdout_path=self.logs / "out", stderr_path=self.logs / "err",
                           limits=self.target.limits, sandbox=spec)


@pytest.fixture
def slots(tiny_target: TinyFactory, tmp_path: Path) -> Slots:
    root = tiny_target(files={"secret_eval.py": "ANSWER = 42\n"})
    cfg = (root / "assay.toml").read_text().replace(
        'protected = ["bench.py"]', 'protected = ["bench.py"]\nholdout = ["secret_eval.py"]')
    (root / "assay.toml").write_text(cfg)
    subprocess.run(["git", "commit", "-qam", "holdout"], cwd=root, check=True)
    target = api.load(root)
    ws = Workspace(target, "main")
    a, b = ws.tree("s0-a"), ws.tree("s0-b")
    target.state_dir.joinpath("journal.sqlite").write_text("the journal\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    return Slots(target, a, b, logs)


def test_the_own_tree_is_writable(slots: Slots) -> None:
    r = slots.run("mkdir -p build && echo obj > build/out.o && echo edit >> work.py")
    assert r.exit_code == 0, r.stderr
    assert (slots.b / "build" / "out.o").read_text() == "obj\n"


def test_the_other_slots_tree_cannot_be_written(slots: Slots) -> None:
    before = (slots.a / "work.py").read_text()
    r = slots.run(f"echo sabotage >> {slots.a / 'work.py'}; echo sabotage >> ../s0-a/work.py")
    assert (slots.a / "work.py").read_text() == before
    assert "sabotage" not in (slots.a / "work.py").read_text()
    assert r.exit_code != 0


def test_the_rest_of_the_file_system_is_read_only(slots: Slots) -> None:
    outside = Path("/var/tmp") / f"assay-test-outside-{os.getpid()}.txt"
    r = slots.run(f"echo x > {outside}")
    assert r.exit_code != 0
    assert not outside.exists()
    site = Path(sys.prefix)
    r = slots.run(f"echo 'import os' > {site / 'assay-test-evil.pth'}")
    assert r.exit_code != 0
    assert not (site / "assay-test-evil.pth").exists()


def test_the_journal_and_state_folder_are_hidden(slots: Slots) -> None:
    journal = slots.target.state_dir / "journal.sqlite"
    r = slots.run(f"cat {journal}; ls {slots.target.state_dir}; ls ../")
    assert "the journal" not in r.stdout
    assert "s0-a" not in r.stdout
    r = slots.run(f"echo forged > {journal}")
    assert journal.read_text() == "the journal\n"


def test_the_users_checkout_and_git_folder_are_hidden(slots: Slots) -> None:
    root = slots.target.root
    r = slots.run(f"cat {root / 'README.md'}; cat {root / '.git' / 'HEAD'}; "
                  f"ls {root / '.git' / 'objects'}")
    assert "tiny target" not in r.stdout
    assert "ref:" not in r.stdout
    assert r.stdout.strip() == ""


def test_the_trees_git_link_is_read_only(slots: Slots) -> None:
    link = slots.b / ".git"
    before = link.read_text()
    slots.run("echo 'gitdir: /somewhere/else' > .git")
    assert link.read_text() == before


def test_holdout_files_are_hidden_except_from_the_holdout_command(slots: Slots) -> None:
    assert (slots.b / "secret_eval.py").read_text() == "ANSWER = 42\n"
    r = slots.run("cat secret_eval.py")
    assert "ANSWER" not in r.stdout
    r = slots.run("cat secret_eval.py", holdout=True)
    assert "ANSWER = 42" in r.stdout


def test_proc_shows_only_the_runs_own_processes(slots: Slots) -> None:
    r = slots.run("cat /proc/[0-9]*/comm")
    names = set(r.stdout.split())
    assert names <= {"bwrap", "bash", "cat"}, names
    assert "python" not in " ".join(names)  # the orchestrator (this test) is not there


def test_no_process_can_read_the_orchestrators_environment(
        slots: Slots, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_TEST_SECRET_KEY", "sk-the-orchestrators-own")
    r = slots.run("cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; "
                  f"cat /proc/{os.getpid()}/environ 2>/dev/null; echo done")
    assert "done" in r.stdout
    assert "sk-the-orchestrators-own" not in r.stdout


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"reached")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


FETCH = ("{py} -c \"import urllib.request as u; "
         "print(u.urlopen('http://127.0.0.1:{port}/', timeout=5).read().decode())\"")


def test_the_network_is_unreachable_by_default(slots: Slots, server: int) -> None:
    assert slots.target.limits.network is None
    r = slots.run(FETCH.format(py=sys.executable, port=server))
    assert "reached" not in r.stdout
    assert r.exit_code != 0


def test_the_network_is_reachable_when_the_config_allows_it(
        tiny_target: TinyFactory, tmp_path: Path, server: int) -> None:
    root = tiny_target(extra="[limits]\nnetwork = true\n")
    target = api.load(root)
    tree = Workspace(target, "main").tree("s0-b")
    env = process.scrubbed_env(target.env)
    spec = contain.spec_for(target, tree, env)
    assert spec is not None and spec.network
    r = process.run(FETCH.format(py=sys.executable, port=server), cwd=tree, env=env,
                    timeout_s=60, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e",
                    sandbox=spec)
    assert "reached" in r.stdout, r.stderr


def _alive(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd:
                found.append(int(d.name))
    return found


def _gone(marker: str, deadline_s: float = 30.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not _alive(marker):
            return True
        time.sleep(0.1)
    return False


def test_a_detached_process_does_not_outlive_its_run(slots: Slots) -> None:
    # setsid leaves the process group; the double fork leaves the parent; both are gone
    r = slots.run("setsid sleep 771 & (sleep 772 & ) & "
                  "nohup setsid bash -c 'trap \"\" TERM HUP; sleep 773' >/dev/null 2>&1 & "
                  "sleep 0.3; echo started")
    assert "started" in r.stdout
    for marker in ("sleep 771", "sleep 772", "sleep 773"):
        assert _gone(marker), f"{marker} outlived its run: {_alive(marker)}"


KILLED_ORCHESTRATOR = """
import sys
from pathlib import Path
from assay import api
from assay.bench import contain, process
from assay.repo.workspace import Workspace
target = api.load(sys.argv[1])
tree = Workspace(target, "main").tree("s0-b")
env = process.scrubbed_env(target.env)
process.run("setsid sleep 774 & (sleep 775 &) & echo up > /dev/stderr; sleep 600",
            cwd=tree, env=env, timeout_s=900, stdout_path=Path(sys.argv[2]) / "o",
            stderr_path=Path(sys.argv[2]) / "e", sandbox=contain.spec_for(target, tree, env))
"""


def test_every_process_dies_with_a_killed_orchestrator(slots: Slots, tmp_path: Path) -> None:
    orchestrator = subprocess.Popen([sys.executable, "-c", KILLED_ORCHESTRATOR,
                                     str(slots.target.root), str(tmp_path)])
    end = time.monotonic() + 60
    while not (_alive("sleep 774") and _alive("sleep 775")) and time.monotonic() < end:
        time.sleep(0.1)
    assert _alive("sleep 774") and _alive("sleep 775")
    orchestrator.send_signal(signal.SIGKILL)
    orchestrator.wait()
    for marker in ("sleep 774", "sleep 775", "sleep 600"):
        assert _gone(marker), f"{marker} outlived the killed orchestrator"


def test_tmp_and_home_are_private_to_each_run(slots: Slots) -> None:
    env = process.scrubbed_env(slots.target.env)
    home = Path(env["HOME"])
    w = slots.run("echo planted > /tmp/assay-shared-note && echo planted > $HOME/.assay-note"
                  " && echo planted > /dev/shm/assay-note && cat /tmp/assay-shared-note")
    assert w.exit_code == 0 and "planted" in w.stdout, w.stderr
    r = slots.run("cat /tmp/assay-shared-note $HOME/.assay-note /dev/shm/assay-note; true")
    assert "planted" not in r.stdout
    for path in (Path("/tmp/assay-shared-note"), home / ".assay-note",
                 Path("/dev/shm/assay-note")):
        assert not path.exists()


def test_the_sandbox_can_be_turned_off_and_then_untrusted_proposers_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.ENV_VAR, "off")
    assert not sandbox.probe().ok
    with pytest.raises(ConfigError, match="--unconfined"):
        contain.gate("llm", unconfined=False)
    assert contain.gate("agent", unconfined=True).unconfined
    assert "unconfined" in contain.gate("queue", unconfined=False).warning


NON_ROOT = """
import sys
from pathlib import Path
import sandbox
tree, other = Path(sys.argv[1]), Path(sys.argv[2])
spec = sandbox.Spec(tree=tree, hidden=(other,), home=str(Path.home()),
                    readable=sandbox.interpreter_paths({"PATH": sys.argv[3]}))
print(sandbox.probe(), flush=True)
cmd = (f"echo built > out.txt; cat {other}/secret.txt; echo x > {other}/planted.txt; "
       "ls /proc | grep -cE '^[0-9]+$'; id -un")
sys.exit(__import__("subprocess").run(sandbox.argv(spec, cmd)).returncode)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can reach (pytest's own is private to root)."""
    with tempfile.TemporaryDirectory(prefix="assay-unprivileged-") as d:
        yield Path(d)


@pytest.mark.root
def test_the_sandbox_works_for_an_unprivileged_user(shared_dir: Path) -> None:
    tmp_path = shared_dir
    if os.geteuid() != 0:
        pytest.skip("needs root to create the user assaytest (useradd) and run as it")
    sbin = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    useradd, runuser = shutil.which("useradd", path=sbin), shutil.which("runuser", path=sbin)
    assert useradd and runuser, "useradd and runuser (Debian's passwd and util-linux)"
    subprocess.run([useradd, "-m", "assaytest"], capture_output=True, check=False)
    user = pwd.getpwnam("assaytest")
    work = tmp_path / "unprivileged"
    tree, other = work / "tree", work / "other"
    tree.mkdir(parents=True)
    other.mkdir()
    (other / "secret.txt").write_text("the other side's secret\n")
    for p in (tmp_path, work, tree, other, other / "secret.txt"):
        os.chown(p, user.pw_uid, user.pw_gid)
    tmp_path.chmod(0o755)
    # the sandbox module needs only the standard library: a copy the user can read
    shutil.copy(sandbox.__file__, work / "sandbox.py")
    (work / "sandbox.py").chmod(0o644)
    python = "/usr/bin/python3"
    env = {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir}
    r = subprocess.run([runuser, "-u", "assaytest", "--", python, "-I", "-c",
                        f"import sys; sys.path.insert(0, {str(work)!r}); exec({NON_ROOT!r})",
                        str(tree), str(other), "/usr/bin:/bin"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tool='" in r.stdout and "tool=''" not in r.stdout, r.stdout
    assert (tree / "out.txt").read_text() == "built\n"
    assert "the other side's secret" not in r.stdout
    assert not (other / "planted.txt").exists()
    assert r.stdout.strip().splitlines()[-1] == "assaytest"
    assert shutil.which("bwrap") is not None


@pytest.mark.root
def test_a_path_entry_the_user_cannot_enter_is_left_out(shared_dir: Path) -> None:
    # runuser keeps the caller's PATH: root's own folders (mode 0700) are in it, and
    # asking whether they are folders is refused to the user
    if os.geteuid() != 0:
        pytest.skip("needs root to create the user assaytest (useradd) and run as it")
    sbin = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    useradd, runuser = shutil.which("useradd", path=sbin), shutil.which("runuser", path=sbin)
    assert useradd and runuser, "useradd and runuser (Debian's passwd and util-linux)"
    subprocess.run([useradd, "-m", "assaytest"], capture_output=True, check=False)
    private = shared_dir / "private"
    (private / "tools" / "bin").mkdir(parents=True)
    private.chmod(0o700)
    shared_dir.chmod(0o755)
    shutil.copy(sandbox.__file__, shared_dir / "sandbox.py")
    (shared_dir / "sandbox.py").chmod(0o644)
    path = f"{private / 'tools' / 'bin'}:/usr/bin:/bin"
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import sandbox; "
              "print(*sandbox.interpreter_paths({'PATH': sys.argv[2]}))")
    r = subprocess.run([runuser, "-u", "assaytest", "--", "/usr/bin/python3", "-I", "-c",
                        script, str(shared_dir), path],
                       cwd=shared_dir, env={"PATH": path}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = r.stdout.split()
    assert "/usr" in shown and str(private / "tools") not in shown, r.stdout
