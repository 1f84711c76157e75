"""Run a command from a candidate's or incumbent's tree inside a bubblewrap sandbox.

A :class:`Spec` says, once and frozen, what one run may touch: its own tree (writable,
build outputs included), a few more writable folders (the tree's own compiler caches and
bytecode folder), what is hidden (covered by an empty folder or an empty file) and
whether the network is reachable. :func:`argv` turns a shell command and a spec into the
argv that runs it under ``bwrap`` (Debian's and most distributions' ``bubblewrap``
package: ``apt-get install bubblewrap``); :func:`probe` says whether this machine can run
it.

What it protects against, for every process of the run:

- writes outside its own tree and the spec's writable folders: the rest of the file
  system is mounted read-only (another slot's tree, the user's checkout, installed
  packages, ``.pth`` files);
- reads of the hidden paths: the target's state folder (journal, logs, process records,
  the other slots' trees), the user's checkout, the repository's git folder (objects,
  hooks, refs, config), the holdout files; the tree's own ``.git`` file is read-only, so
  the tree cannot be pointed at another git folder;
- a shared ``/tmp`` or ``$HOME``: each is a fresh, empty folder private to the run (the
  interpreter's prefix, the tree and the paths the command line names are shown again,
  read-only but the tree); what the run writes there vanishes with it;
- seeing or signalling other processes: a fresh PID namespace, ``/proc`` shows only the
  run's own processes (never assay's, whose environment holds no key anyway);
- the network, unless the spec allows it (``[limits] network = true``): only a loopback
  device of its own;
- outliving the run: when the command exits, or when assay dies (``kill -9`` included),
  the PID namespace ends and the kernel kills every process in it, however it detached
  (``setsid``, double fork);
- privileges: every capability is dropped, the run is a new session (no terminal
  injection).

What it does NOT protect against: reading files outside the hidden paths (the rest of the
file system is readable: choose what to hide); using the CPU, memory or disk bandwidth
while the other side runs (see ``[limits]`` for memory and CPU time); a candidate's
writes to its tree's own caches reaching a later candidate measured in the same tree
(never the incumbent nor another slot); kernel exploits. The environment is what the
caller passes (see :func:`assay.bench.process.scrubbed_env`).

``ASSAY_SANDBOX`` selects it: unset or ``auto`` (bwrap where it works), ``bwrap`` (an
error where it does not), or ``off`` (behave as a machine without a sandbox: tests and
the ``--unconfined`` path use it).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "ASSAY_SANDBOX"
CHOICES = ("auto", "bwrap", "off")
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf " \
          "install bubblewrap) and allow unprivileged user namespaces " \
          "(sysctl kernel.unprivileged_userns_clone=1)"


@dataclass(frozen=True)
class Spec:
    """What one sandboxed run may touch; paths are absolute.

    ``tree``: the run's working tree, writable. ``writable``: more writable folders.
    ``hidden``: covered (a folder by an empty one, a file by an empty file), even when
    inside ``tree``. ``readable``: shown again, read-only, where a hidden path or the
    private ``/tmp``/``$HOME`` covers them (the interpreter and its packages).
    ``protected``: inside ``tree`` but read-only. ``home``: the ``$HOME`` to make private
    ('' for none). ``network``: whether the run reaches the network.
    """

    tree: Path
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()
    home: str = ""
    network: bool = False


@dataclass(frozen=True)
class Probe:
    """Whether this machine can sandbox: ``tool`` ('' when it cannot) and why not."""

    tool: str
    why: str

    @property
    def ok(self) -> bool:
        return bool(self.tool)


_PROBED: dict[str, Probe] = {}


def probe(environ: Mapping[str, str] | None = None) -> Probe:
    """Try the sandbox once per process (``ASSAY_SANDBOX`` decides whether to try)."""
    choice = (os.environ if environ is None else environ).get(ENV_VAR, "auto") or "auto"
    if choice not in CHOICES:
        return Probe("", f"{ENV_VAR}={choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "off":
        return Probe("", f"{ENV_VAR}=off turns the sandbox off")
    if choice not in _PROBED:
        _PROBED[choice] = _try_bwrap()
    return _PROBED[choice]


def _try_bwrap() -> Probe:
    exe = shutil.which("bwrap")
    if exe is None:
        return Probe("", f"bubblewrap (`bwrap`) is not installed: {INSTALL}")
    spec = Spec(tree=Path("/"))
    try:
        r = subprocess.run(argv(spec, "true", exe), capture_output=True, text=True,
                           timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe("", f"`bwrap` does not run here ({exc}): {INSTALL}")
    if r.returncode != 0:
        said = " ".join(r.stderr.strip().splitlines()[-2:])
        return Probe("", f"`bwrap` cannot create its namespaces here ({said}): {INSTALL}")
    return Probe(exe, "")


def interpreter_paths(env: Mapping[str, str]) -> tuple[Path, ...]:
    """What the command needs to start programs: each ``PATH`` folder (the folder above a
    ``bin``, so a virtual environment comes whole) and this interpreter's prefixes."""
    out: list[Path] = []
    for entry in env.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry):
            p = Path(entry)
            out.append(p.parent if p.name == "bin" and p.parent != Path("/") else p)
    out += [Path(sys.prefix), Path(sys.base_prefix)]
    return tuple(dict.fromkeys(p for p in out if _is_folder(p)))


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder this user can see: a ``PATH`` entry inherited from
    another user whose home this one cannot enter (a ``PATH`` kept by ``runuser``) is not
    one, and no error."""
    try:
        return path.is_dir()
    except PermissionError:
        return False


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def named_paths(cmd: str) -> tuple[Path, ...]:
    """The existing absolute paths a command line names (a script, a data file)."""
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    out: list[Path] = []
    for word in words:
        for part in word.split("=")[-1:]:
            if part.startswith("/") and ".." not in part:
                p = Path(part)
                if p.exists() and not p.is_symlink():
                    out.append(p)
    return tuple(dict.fromkeys(out))


def _mounts(spec: Spec, named: Sequence[Path] = ()) -> list[list[str]]:
    """The mounts after the read-only root, parents before what they hold."""
    covers = [Path("/tmp")]
    home = Path(spec.home) if spec.home else None
    if home is not None and home.is_absolute() and home != Path("/"):
        covers.append(home)
    ops: list[tuple[int, int, list[str]]] = []  # (depth, order among equals, bwrap args)
    for p in covers:
        ops.append((len(p.parts), 0, ["--tmpfs", str(p)]))
    for p in named:  # what the command names there stays, read-only
        if any(_inside(p, c) and p != c for c in covers) \
                and not any(_inside(p, h) for h in spec.hidden):
            ops.append((len(p.parts), 1, ["--ro-bind-try", str(p), str(p)]))
    binds = (spec.tree, *spec.writable)
    for p in spec.hidden:
        if p.is_symlink() or not p.exists():
            continue
        if any(_inside(p, h) and p != h for h in spec.hidden) \
                and not any(_inside(p, b) for b in binds):
            continue  # a hidden folder above covers it already
        ops.append((len(p.parts), 2, ["--tmpfs", str(p)] if p.is_dir()
                    else ["--ro-bind", "/dev/null", str(p)]))
    shadowed = [*covers, *spec.hidden]
    for p in spec.readable:
        if any(_inside(p, c) and p != c for c in shadowed):
            ops.append((len(p.parts), 3, ["--ro-bind", str(p), str(p)]))
    for p in binds:
        ops.append((len(p.parts), 4, ["--bind", str(p), str(p)]))
    for p in spec.protected:
        if p.exists() and not p.is_symlink():
            ops.append((len(p.parts), 5, ["--ro-bind", str(p), str(p)]))
    ops.sort(key=lambda o: (o[0], o[1]))
    return [o[2] for o in ops]


def argv(spec: Spec, cmd: str, exe: str = "bwrap") -> list[str]:
    """The argv that runs ``cmd`` with bash in ``spec.tree`` inside the sandbox."""
    out = [exe, "--die-with-parent", "--new-session", "--unshare-user-try",
           "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not spec.network:
        out.append("--unshare-net")
    out += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
            "--tmpfs", "/dev/shm", "--proc", "/proc"]
    for mount in _mounts(spec, named_paths(cmd)):
        out += mount
    out += ["--chdir", str(spec.tree), "--", "bash", "-c", cmd]
    return out


def paths_exist(paths: Sequence[Path]) -> tuple[Path, ...]:
    """The existing ones among ``paths``, resolved, without repeats."""
    return tuple(dict.fromkeys(p.resolve() for p in paths if p.exists() or p.is_symlink()))
