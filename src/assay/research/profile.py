"""Run the benchmark under a profiler suited to it and name the hot functions.

Which profiler:

* a Python benchmark (the command runs ``python``, a ``.py`` file, ``pytest``, ...) runs
  under **py-spy** (``py-spy record --format raw --subprocesses``); when py-spy is missing
  or cannot attach (ptrace refused), under **cProfile**, injected through a
  ``sitecustomize`` on ``PYTHONPATH`` so it follows every Python process the command starts;
* when the target imports torch, a second run under **torch.profiler** (started when torch
  is first imported) names the heaviest operators;
* anything else runs under **perf** where it is installed and permitted.

The result always says what was used and why; a benchmark that cannot be profiled gives an
empty result with the reason, never an exception.

Shares: ``share`` is the fraction of samples whose deepest frame in the target's own code
is that function (time in library code it calls counts for it); ``self_share`` is the
fraction where it is the leaf frame; ``total_share`` where it is anywhere on the stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.+?)(?::(?P<line>\d+))?\)$")
_COMPREHENSION = re.compile(r"(\.<locals>)?\.<(listcomp|genexpr|dictcomp|setcomp|lambda)>$")
_SYSTEM_DSO = re.compile(r"^(\[.*\]|libc[.-].*|libm[.-].*|ld-linux.*|libstdc\+\+.*|"
                         r"libgomp.*|libpthread.*|libgcc.*|libdl.*)$")
_PY = re.compile(r"^(python(\d+(\.\d+)*)?|pypy\d*|pytest|py\.test|ipython)$")
_WRAPPERS = frozenset({"uv", "run", "poetry", "pdm", "hatch", "rye", "time", "nice", "env",
                       "exec", "-m", "conda", "pipenv", "taskset", "numactl"})


@dataclass(frozen=True)
class HotSpot:
    function: str
    file: str  # relative to the target root when inside it
    line: int | None  # the hottest line seen in it
    share: float  # see the module docstring
    self_share: float = 0.0
    total_share: float = 0.0
    in_target: bool = True

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    @property
    def label(self) -> str:
        return f"{self.function} ({self.where})"


@dataclass
class ProfileResult:
    profiler: str  # "py-spy", "cProfile", "perf", "torch.profiler", "none"
    command: str
    hotspots: list[HotSpot] = field(default_factory=list)
    samples: int = 0
    wall_s: float = 0.0
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)
    operators: list[HotSpot] = field(default_factory=list)  # torch.profiler operators
    stdout: str = ""  # the benchmark's stdout under the profiler (for the metric)

    @property
    def ok(self) -> bool:
        return bool(self.hotspots or self.operators)


def is_python_command(cmd: str) -> bool:
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    for w in words:
        if "=" in w and not w.startswith("-") and w.split("=", 1)[0].isidentifier():
            continue  # FOO=bar prefix
        base = os.path.basename(w)
        if _PY.match(base) or base.endswith(".py"):
            return True
        if base in _WRAPPERS or w.startswith("-"):
            continue
        return False
    return False


def uses_torch(root: Path, files: Sequence[Path]) -> bool:
    pat = re.compile(r"^\s*(import torch|from torch[\s.])", re.M)
    for f in files[:2000]:
        if f.suffix != ".py":
            continue
        try:
            if pat.search(f.read_text(encoding="utf-8", errors="replace")):
                return True
        except OSError:
            continue
    return False


def _py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    cand = Path(sys.executable).with_name("py-spy")
    return str(cand) if cand.exists() else None


def profile_command(cmd: str, root: Path, *, env: Mapping[str, str] | None = None,
                    timeout_s: float = 600.0, rate: int = 200, prefer: str = "auto",
                    torch: bool = False, top: int = 10) -> ProfileResult:
    """Profile ``cmd`` (a shell command run in ``root``) and return its hot functions.

    ``prefer`` forces a profiler: ``py-spy``, ``cProfile``, ``perf`` (``auto`` picks).
    """
    run_env = dict(env if env is not None else os.environ)
    python = is_python_command(cmd)
    notes: list[str] = []
    order: list[str]
    if prefer != "auto":
        order = [prefer]
    elif python:
        order = ["py-spy", "cProfile"]
        notes.append("the benchmark runs Python: profiling with py-spy")
    else:
        order = ["perf", "py-spy"] if shutil.which("perf") else ["py-spy"]
        notes.append("the benchmark is not a Python command: "
                     + ("profiling with perf" if shutil.which("perf")
                        else "perf is not installed; trying py-spy on its Python children"))
    result = ProfileResult("none", cmd, notes=notes)
    for name in order:
        if name == "py-spy":
            res = _run_py_spy(cmd, root, run_env, timeout_s, rate, top)
        elif name == "cProfile":
            res = _run_cprofile(cmd, root, run_env, timeout_s, top)
        elif name == "perf":
            res = _run_perf(cmd, root, run_env, timeout_s, top)
        else:
            res = ProfileResult("none", cmd, notes=[f"unknown profiler {name!r}"])
        result.notes.extend(res.notes)
        if res.ok:
            res.notes = result.notes
            result = res
            break
    judge(result)
    if not result.ok:
        result.notes.append("no profiler produced samples: hot spots are unknown")
    if torch and python:
        tres = _run_torch(cmd, root, run_env, timeout_s, top)
        result.notes.extend(tres.notes)
        result.operators = tres.operators
    return result


_IDLE = re.compile(
    r"(^|_)(idle|spin|schedule|futex|sched_yield|nanosleep|clock_nanosleep|epoll_wait|"
    r"poll|select|pthread_cond_\w*wait|sem_wait|usleep|sleep|wait4|waitpid|"
    r"read|write|do_syscall\w*|entry_syscall\w*|syscall)(_|$)|^_raw_spin|^\[k\]")
DOMINATED = 0.5  # kernel + idle share from which the profile is not the program's


def judge(result: ProfileResult) -> None:
    """Honest results: a failed run gives no hot spots, and a profile that is mostly
    kernel or idle frames says so."""
    code = result.exit_code
    if code not in (0, None) and (result.hotspots or result.operators):
        result.hotspots = []
        result.operators = []
        result.notes.append(
            f"the benchmark exited with {code} under {result.profiler}: no hot spots, "
            "because a failing run's profile is not the benchmark's (run it by hand and "
            "fix it, or check the command in [commands] bench)")
        return
    if not result.hotspots:
        return
    idle = sum(h.share for h in result.hotspots
               if not h.in_target and (h.file in ("[kernel.kallsyms]", "[kernel]") or
                                       _IDLE.search(h.function.split("(")[0])))
    if idle >= DOMINATED:
        result.notes.append(
            f"the profile is dominated by kernel or idle frames ({idle:.0%} of samples): "
            "the benchmark mostly waits (I/O, locks, sleeping threads) or the profiler "
            "sampled something else; its own hot spots are small")


def _run(argv: Sequence[str], root: Path, env: Mapping[str, str], timeout_s: float
         ) -> tuple[int | None, str, float, str]:
    """Run: (exit code, or None on a timeout; stderr+stdout; wall seconds; stdout)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), cwd=root, env=dict(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
    except OSError as exc:
        return None, str(exc), time.monotonic() - start, ""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # the profiler, the shell and the benchmark share one process group: end them all
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return (None, (err or "") + f"\n(timed out after {timeout_s:.0f}s)",
                time.monotonic() - start, out or "")
    return proc.returncode, (err or "") + (out or ""), time.monotonic() - start, out or ""


def _tail(text: str, n: int = 2) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def _rel(file: str, root: Path) -> tuple[str, bool]:
    try:
        p = Path(file)
        if not p.is_absolute():
            return file, (root / p).exists()
        return p.resolve().relative_to(root.resolve()).as_posix(), True
    except (ValueError, OSError):
        return file, False


def _run_py_spy(cmd: str, root: Path, env: Mapping[str, str], timeout_s: float, rate: int,
                top: int) -> ProfileResult:
    exe = _py_spy()
    if exe is None:
        return ProfileResult("py-spy", cmd, notes=[
            "py-spy is not installed (pip install 'assay[research]'): falling back"])
    with tempfile.TemporaryDirectory(prefix="assay-pyspy-") as tmp:
        out = Path(tmp) / "profile.txt"
        rc, log, wall, stdout = _run([exe, "record", "--format", "raw", "--full-filenames",
                              "--subprocesses", "--rate", str(rate), "-o", str(out),
                              "--", "/bin/sh", "-c", cmd], root, env, timeout_s)
        raw = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    stacks = parse_folded(raw)
    res = aggregate(stacks, root, top)
    res.profiler, res.command, res.wall_s, res.exit_code = "py-spy", cmd, wall, rc
    res.stdout = stdout
    if not res.hotspots:
        why = _tail(log) or "no samples"
        if "ptrace" in log.lower() or "permission" in log.lower():
            why = "py-spy cannot attach (ptrace not permitted): " + why
        res.notes.append(f"py-spy gave no samples ({why}): falling back")
    return res


def parse_folded(text: str) -> Counter[tuple[str, ...]]:
    """``frame;frame;frame count`` lines (py-spy raw, perf script folded) to a Counter."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = tuple(f for f in stack.split(";") if f and not f.startswith("process "))
        if frames:
            stacks[frames] += int(count)
    return stacks


def aggregate(stacks: Counter[tuple[str, ...]], root: Path, top: int = 10) -> ProfileResult:
    total = sum(stacks.values())
    res = ProfileResult("", "", samples=total)
    if not total:
        return res
    own: Counter[tuple[str, str]] = Counter()
    leaf: Counter[tuple[str, str]] = Counter()
    incl: Counter[tuple[str, str]] = Counter()
    lines: dict[tuple[str, str], Counter[int]] = {}
    inside: dict[tuple[str, str], bool] = {}
    for frames, n in stacks.items():
        parsed: list[tuple[tuple[str, str], int | None]] = []
        for fr in frames:
            m = _FRAME.match(fr)
            if not m:
                parsed.append(((fr, ""), None))
                continue
            file, ok = _rel(m["file"], root)
            key = (_COMPREHENSION.sub("", m["func"]), file)
            inside.setdefault(key, ok)
            parsed.append((key, int(m["line"]) if m["line"] else None))
        leaf[parsed[-1][0]] += n
        for key in {k for k, _ in parsed}:
            incl[key] += n
        deepest = next(((k, ln) for k, ln in reversed(parsed)
                        if inside.get(k) and k[0] != "<module>"), None)
        if deepest is not None:
            own[deepest[0]] += n
            if deepest[1] is not None:
                lines.setdefault(deepest[0], Counter())[deepest[1]] += n
        for k, ln in parsed:
            if ln is not None and k not in lines:
                lines.setdefault(k, Counter())[ln] += 0
    ranking = own if own else leaf
    for key, n in ranking.most_common(top):
        best = lines.get(key)
        line = best.most_common(1)[0][0] if best else None
        res.hotspots.append(HotSpot(key[0], key[1], line, n / total, leaf[key] / total,
                                    incl[key] / total, inside.get(key, False)))
    return res


_SITECUSTOMIZE = '''
import atexit, cProfile, os
_assay_prof = cProfile.Profile()
_assay_prof.enable()
def _assay_dump():
    _assay_prof.disable()
    out = os.environ.get("ASSAY_CPROFILE_DIR")
    if out:
        _assay_prof.dump_stats(os.path.join(out, "%d.prof" % os.getpid()))
atexit.register(_assay_dump)
'''


@contextlib.contextmanager
def _hooked_run(cmd: str, root: Path, env: Mapping[str, str], timeout_s: float, hook: str,
                out_var: str) -> Iterator[tuple[int | None, str, float, str, Path]]:
    """Run ``cmd`` once with ``hook`` as its ``sitecustomize`` (found first on PYTHONPATH),
    the folder the hook writes to named in ``out_var``: (exit code, log, wall seconds,
    stdout, that folder), the folder gone when the block ends."""
    with tempfile.TemporaryDirectory(prefix="assay-hook-") as tmp:
        site = Path(tmp) / "site"
        out = Path(tmp) / "out"
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(hook, encoding="utf-8")
        run_env = dict(env)
        run_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(site), env.get("PYTHONPATH", "")) if p)
        run_env[out_var] = str(out)
        rc, log, wall, stdout = _run(["/bin/sh", "-c", cmd], root, run_env, timeout_s)
        yield rc, log, wall, stdout, out


def _run_cprofile(cmd: str, root: Path, env: Mapping[str, str], timeout_s: float,
                  top: int) -> ProfileResult:
    import pstats

    with _hooked_run(cmd, root, env, timeout_s, _SITECUSTOMIZE, "ASSAY_CPROFILE_DIR") as (
            rc, log, wall, stdout, out):
        dumps = sorted(out.glob("*.prof"))
        res = ProfileResult("cProfile", cmd, wall_s=wall, exit_code=rc,
                            stdout=stdout)
        if not dumps:
            res.notes.append(f"cProfile wrote no profile ({_tail(log) or 'no Python ran'})")
            return res
        stats = pstats.Stats(*[str(d) for d in dumps])
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values()) or 1e-12
    rows = []
    for (file, line, func), (_cc, _nc, tt, ct, _callers) in table.items():
        rel, ok = _rel(file, root)
        rows.append((func, rel, line, tt, ct, ok))
    own_rows = [r for r in rows if r[5] and r[0] != "<module>"] or rows
    own_rows.sort(key=lambda r: -r[3])
    for func, rel, line, tt, ct, ok in own_rows[:top]:
        res.hotspots.append(HotSpot(func, rel, line or None, tt / total, tt / total,
                                    min(1.0, ct / total), ok))
    res.samples = len(rows)
    res.notes.append("profiled with cProfile (deterministic; shares are self time, "
                     "and its overhead inflates call-heavy code)")
    return res


def _run_perf(cmd: str, root: Path, env: Mapping[str, str], timeout_s: float,
              top: int) -> ProfileResult:
    perf = shutil.which("perf")
    if perf is None:
        return ProfileResult("perf", cmd, notes=["perf is not installed"])
    with tempfile.TemporaryDirectory(prefix="assay-perf-") as tmp:
        data = Path(tmp) / "perf.data"
        rc, log, wall, stdout = _run([perf, "record", "-e", "cpu-clock", "-F", "999", "-g", "-o",
                              str(data), "--", "/bin/sh", "-c", cmd], root, env, timeout_s)
        res = ProfileResult("perf", cmd, wall_s=wall, exit_code=rc,
                            stdout=stdout)
        if not data.exists():
            res.notes.append(f"perf could not record ({_tail(log)})")
            return res
        report = _run([perf, "report", "-i", str(data), "--stdio", "--no-children",
                       "--sort", "dso,sym", "--percent-limit", "0.5"],
                      root, env, 120.0)[1]
    counted = re.search(r"^# Samples: (\d+)([KM]?)", report, re.M)
    if counted:
        res.samples = int(counted[1]) * {"": 1, "K": 1000, "M": 1000000}[counted[2]]
    pat = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(?:k|(\.))\]\s+(.+?)\s*$")
    for line in report.splitlines():
        m = pat.match(line)
        if not m:
            continue
        share = float(m[1]) / 100.0
        dso, sym = m[2], m[4]
        if dso in ("sh", "dash", "bash") or sym.startswith("0x"):
            continue
        mine = m[3] is not None and not _SYSTEM_DSO.match(dso)
        res.hotspots.append(HotSpot(sym, dso, None, share, share, share, mine))
    # the program's own code first (the kernel and libc are context, not targets)
    res.hotspots.sort(key=lambda h: (not h.in_target, -h.share))
    del res.hotspots[top:]
    if not res.hotspots:
        res.notes.append(f"perf recorded no usable samples ({_tail(report or log)})")
    return res


_TORCH_HOOK = '''
import atexit, importlib.abc, importlib.machinery, json, os, sys

class _AssayTorchHook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module
        def exec_module(module):
            run(module)
            _assay_start(module)
        loader.exec_module = exec_module
        return spec

def _assay_start(torch):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=acts)
    prof.__enter__()
    def dump():
        prof.__exit__(None, None, None)
        rows = []
        for e in prof.key_averages():
            dev = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            rows.append([e.key, e.self_cpu_time_total, dev, e.count])
        out = os.environ["ASSAY_TORCH_OUT"]
        with open(os.path.join(out, "%d.json" % os.getpid()), "w") as f:
            json.dump(rows, f)
    atexit.register(dump)

sys.meta_path.insert(0, _AssayTorchHook())
'''


def _run_torch(cmd: str, root: Path, env: Mapping[str, str], timeout_s: float,
               top: int) -> ProfileResult:
    with _hooked_run(cmd, root, env, timeout_s, _TORCH_HOOK, "ASSAY_TORCH_OUT") as (
            rc, log, wall, _out, out):
        rows: list[list[object]] = []
        for f in out.glob("*.json"):
            try:
                rows.extend(json.loads(f.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    res = ProfileResult("torch.profiler", cmd, wall_s=wall, exit_code=rc)
    if not rows:
        res.notes.append(f"torch.profiler recorded nothing ({_tail(log) or 'torch not run'})")
        return res
    merged: dict[str, float] = {}
    for row in rows:
        key, cpu, dev = str(row[0]), row[1], row[2]
        if isinstance(cpu, (int, float)) and isinstance(dev, (int, float)):
            merged[key] = merged.get(key, 0.0) + float(cpu) + float(dev)
    total = sum(merged.values()) or 1e-12
    for key, t in sorted(merged.items(), key=lambda kv: -kv[1])[:top]:
        res.operators.append(HotSpot(key, "torch operator", None, t / total, t / total,
                                     t / total, False))
    res.notes.append("torch.profiler ran a second time to name the heaviest torch operators")
    return res
