"""`agent`: a coding-agent CLI edits a checkout of the incumbent; its diff is the candidate.

Configuration (``[proposer.agent]``)::

    [proposer.agent]
    preset = "claude"        # "claude", "codex" or "aider": a ready command (below)
    command = "..."          # or your own command template (overrides preset)
    model = ""               # fills {model}; with a preset, adds its --model flag
    timeout_s = 1800         # wall clock per run; the agent's whole process group is killed
    env = ["ANTHROPIC_API_KEY"]  # extra variables passed through, on top of [env] allow
    ignore = [".aider*"]     # untracked scratch files the agent leaves, dropped before diff
    context_tokens = 16000   # budget of the brief (see context.py)
    include_files = false    # true: the brief also holds the editable files' text
    parallel = 0             # agents run at once in one wave; 0 = one per candidate

Presets (``{model}`` flags only when ``model`` is set)::

    claude: claude -p --output-format json --permission-mode acceptEdits "<ask>"
    codex:  codex exec --json --full-auto "<ask>"
    aider:  aider --yes-always --no-auto-commits --no-gitignore --no-check-update
            --no-show-model-warnings --message-file {brief_file} {files}

where ``<ask>`` tells the agent to read the brief file in the working tree.

Command templates run with bash in the worktree. Placeholders, each replaced by a
shell-quoted value (do not put them inside quotes): ``{brief_file}`` (absolute path of the
brief), ``{brief_name}`` (its name relative to the worktree), ``{brief}`` (its text),
``{hypothesis_file}``, ``{worktree}``, ``{files}`` (the editable files, space-separated),
``{model}``. Other braces (``${HOME}``) are left alone.

One run: a private checkout of the incumbent in the system's temporary folder, outside the
target and its ``.assay`` (a fresh repository with no link back, the holdout files left out;
see :mod:`assay.proposers.sandbox`), the brief written to ``.assay-brief.md`` in it; the
agent runs in the sandbox (:mod:`assay.sandbox`): the checkout writable, the rest of the
file system read-only, the target's folder (your checkout, its git folder, the journal and
logs) hidden, ``/proc`` showing only its processes, the network reachable; where no sandbox
works, a mount namespace hides the target's folder if the machine allows one
(``meta["isolation"]`` says which applied); the command run in its own process group with a scrubbed
environment (``[env] allow`` and ``set``, plus the names in ``env``), killed as a group at
``timeout_s``; then the brief, the hypothesis file and the ``ignore`` globs are removed,
untracked files are marked with ``git add --intent-to-add`` and the candidate is the
``git diff`` against the checkout's first commit (commits the agent made are included).

The hypothesis: the first line of ``.assay-hypothesis.txt`` if the agent wrote it, else the
last ``HYPOTHESIS: ...`` line of its output, else a note naming the files changed.

Rejections. A run that cannot become a candidate is returned as a **rejected candidate**,
a :class:`~assay.model.Candidate` whose ``meta["rejected"]`` says why (test it with
:func:`assay.proposers.edits.rejection`); its ``patch`` holds the diff when there is one,
so the journal shows what was attempted. The loop records it and never runs it. Reasons:
``timeout``, ``exit`` (non-zero exit status; the stderr tail is kept), ``scope`` (a path
outside the editable scope, or protected: every offending path is named), ``no_change``,
``duplicate`` (the same diff as an experiment already tried, after one re-run with a note).
Exceptions are kept for what no retry fixes: the CLI is missing (``ProposerError``) or
the configuration is wrong (``ConfigError``).
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import keys
from ..bench.contain import spec_for
from ..bench.process import PROCS_DIR, mount_isolation_available, scrubbed_env
from ..bench.process import run as run_process
from ..config.spec import Target, glob_match
from ..errors import ProposerError
from ..journal.store import Journal
from ..model import Candidate
from ..repo.git import git
from ..sandbox import Spec
from ..usage import Usage
from .base import ProposalContext, Proposer
from .cli_usage import read_usage
from .context import build_context, incumbent_files
from .edits import DIFF_ARGS, path_problem, rejected
from .sandbox import hidden_paths, private_checkout

BRIEF_NAME = ".assay-brief.md"
HYPOTHESIS_NAME = ".assay-hypothesis.txt"
_ASK = "Read the task in .assay-brief.md (in the current directory) and carry it out."
PRESETS: Mapping[str, str] = {
    "claude": f'claude -p --output-format json --permission-mode acceptEdits "{_ASK}"',
    "codex": f'codex exec --json --full-auto "{_ASK}"',
    "aider": ("aider --yes-always --no-auto-commits --no-gitignore --no-check-update "
              "--no-show-model-warnings --message-file {brief_file} {files}"),
}
MODEL_FLAGS: Mapping[str, str] = {"claude": " --model {model}", "codex": " -m {model}",
                                  "aider": " --model {model}"}
PRESET_IGNORE: Mapping[str, tuple[str, ...]] = {"aider": (".aider*",)}
PLACEHOLDERS = ("brief_file", "brief_name", "brief", "hypothesis_file", "worktree", "files",
                "model")
_HYP = re.compile(r"^\W*hypothesis\W*:\s*(.+?)\s*\**\s*$", re.IGNORECASE)


def render_command(template: str, values: Mapping[str, str]) -> str:
    """Replace the known ``{placeholders}`` with shell-quoted values."""
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key == "files":
            return " ".join(shlex.quote(f) for f in values["files"].split("\0") if f)
        return shlex.quote(values[key])
    pattern = r"(?<!\$)\{(" + "|".join(PLACEHOLDERS) + r")\}"
    return re.sub(pattern, sub, template)


@dataclass(frozen=True)
class AgentRun:
    """What one agent run left behind, before it becomes a candidate."""

    patch: str
    paths: tuple[str, ...]
    hypothesis: str
    exit_code: int | None
    timed_out: bool
    wall_s: float
    stdout: str
    stderr: str
    usage: Usage
    isolation: str = ""


class AgentProposer(Proposer):
    """Proposals from a coding-agent CLI run in a clean worktree of the incumbent."""

    name = "agent"

    def __init__(self, target: Target, command: str, *, timeout_s: float = 1800.0,
                 env_names: Sequence[str] = (), ignore: Sequence[str] = (),
                 model: str = "", context_tokens: int = 16_000, include_files: bool = False,
                 parallel: int = 0, environ: Mapping[str, str] | None = None) -> None:
        self.target = target
        self.command = command
        self.timeout_s = timeout_s
        self.env_names = tuple(env_names)
        self.ignore = tuple(ignore)
        self.model = model
        self.context_tokens = context_tokens
        self.include_files = include_files
        self.parallel = parallel
        self._environ = environ
        self._lock = threading.Lock()
        self.last_brief = ""

    @classmethod
    def from_target(cls, target: Target, *,
                    environ: Mapping[str, str] | None = None) -> AgentProposer:
        """Read and validate ``[proposer.agent]``."""
        sec = target.section("proposer.agent")
        preset = sec.choice("preset", tuple(PRESETS), None)
        command = sec.get("command", str, None, valid="a shell command template")
        model = sec.get("model", str, "")
        timeout_s = float(sec.number("timeout_s", 1800.0, low=1.0))
        env_names = sec.strings("env", ())
        ignore = sec.strings("ignore", ())
        context_tokens = sec.number("context_tokens", 16_000, low=1000, integer=True)
        include_files = sec.get("include_files", bool, False)
        parallel = sec.number("parallel", 0, low=0, high=64, integer=True)
        sec.reject_unknown()
        for name in env_names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise sec.error("env", f"{name!r} is not an environment variable name",
                                "names such as ANTHROPIC_API_KEY")
        if command is None and preset is None:
            raise sec.error("", "needs `preset` (" + ", ".join(PRESETS) + ") or `command`",
                            'e.g. preset = "claude", or command = "my-agent {brief_file}"')
        if command is not None and not command.strip():
            raise sec.error("command", "must not be empty", "a shell command template")
        if command is None:
            assert preset is not None
            command = PRESETS[preset] + (MODEL_FLAGS[preset] if model else "")
            ignore = (*PRESET_IGNORE.get(preset, ()), *ignore)
        return cls(target, command, timeout_s=timeout_s, env_names=env_names, ignore=ignore,
                   model=model, context_tokens=context_tokens, include_files=include_files,
                   parallel=parallel, environ=environ)

    # ------------------------------------------------------------------ proposing

    def brief_text(self, context: ProposalContext, note: str = "") -> str:
        t = self.target
        todo = [
            "## What to do",
            "You are in a git working tree checked out at the incumbent. Make ONE change that "
            f"you expect to improve `{t.metric.name}` by more than the threshold above.",
            f"- Edit only files matching: {', '.join(t.editable)}. Any other change (new "
            "scratch files included) rejects the whole candidate.",
            "- Never touch protected files: "
            + (", ".join(t.protected) + ", " if t.protected else "") + "assay.toml.",
            "- Do not run the full benchmark; assay measures the change itself.",
            f"- Write one line to {HYPOTHESIS_NAME} in the working tree root: your hypothesis, "
            "what the change is and why it should help. Also end your last message with a "
            "line `HYPOTHESIS: <the same line>`. If the change tests one of the open "
            "hypotheses listed as H<number>, begin the line with that id (`H4: ...`).",
            "- Leave the changes uncommitted.",
        ]
        if note:
            todo.append(f"- Note: {note}")
        built = build_context(context, self.context_tokens, include_files=self.include_files,
                              note="\n".join(todo))
        return built.text

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        if n <= 0:
            return []
        seen = set(context.tried_digests)
        seen_lock = threading.Lock()
        workers = n if self.parallel <= 0 else min(n, self.parallel)

        def one(i: int) -> Candidate:
            return self._one(context, i, seen, seen_lock)

        if workers == 1:
            return [one(i) for i in range(n)]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="assay-agent") as pool:
            return list(pool.map(one, range(n)))

    def _one(self, context: ProposalContext, i: int, seen: set[str],
             seen_lock: threading.Lock) -> Candidate:
        commit = context.incumbent.commit
        note = ""
        runs = 0
        total_wall = 0.0
        meter = context.metered(self.name)
        calls: list[int] = []
        while True:
            runs += 1
            # an agent's own calls are not bounded in advance: the check counts its brief's
            # budget and what is spent
            meter.check(self.model, self.context_tokens, None)
            result = self._run_once(context, f"agent-{i}", note)
            total_wall += result.wall_s
            u, call_id = meter.charge(result.usage)
            calls += [call_id] if call_id is not None else []
            meta: dict[str, Any] = {
                "command": self.command.split()[0] if self.command.split() else "",
                "model": self.model or u.model,
                "exit_code": result.exit_code, "timed_out": result.timed_out,
                "wall_s": round(total_wall, 3), "attempts": runs,
                "model_calls": calls,
                "isolation": result.isolation,
            }
            hyp = result.hypothesis
            if result.timed_out:
                return rejected(commit, self.name, f"timeout: the agent ran past "
                                f"{self.timeout_s:g} s and was killed with its process group",
                                patch=result.patch, hypothesis=hyp, meta=meta)
            if result.exit_code != 0:
                tail = " ".join(result.stderr.strip().splitlines()[-5:])[-500:]
                return rejected(commit, self.name, f"exit: the agent exited with status "
                                f"{result.exit_code}: {tail}", patch=result.patch,
                                hypothesis=hyp, meta=meta)
            problems = [p for p in (path_problem(self.target, x) for x in result.paths) if p]
            if problems:
                return rejected(commit, self.name, "scope: " + "; ".join(problems),
                                patch=result.patch, hypothesis=hyp, meta=meta)
            if not result.patch.strip():
                return rejected(commit, self.name, "no_change: the agent changed no file",
                                hypothesis=hyp, meta=meta)
            hyp = hyp or ("(the agent gave no hypothesis) changes "
                          + ", ".join(result.paths[:5]))
            cand = Candidate(base_commit=commit, patch=result.patch, hypothesis=hyp,
                             proposer=self.name, meta=meta)
            with seen_lock:
                duplicate = cand.digest in seen
                if not duplicate:
                    seen.add(cand.digest)
            if not duplicate:
                return cand
            if runs >= 2:
                return rejected(commit, self.name, "duplicate: the same change as an "
                                "experiment already tried", patch=result.patch,
                                hypothesis=hyp, meta=meta)
            note = ("a previous attempt made exactly the same change as an experiment already "
                    "tried (see the journal); make a different change.")

    def _checkout(self, context: ProposalContext) -> tuple[Path, str, Callable[[], None]]:
        """A private checkout of the incumbent (see sandbox.py), its base commit, a disposer."""
        tmp = Path(tempfile.mkdtemp(prefix="assay-agent-"))
        tree = tmp / "tree"
        try:
            base = private_checkout(self.target, context.incumbent.commit, tree)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tree, base, lambda: shutil.rmtree(tmp, ignore_errors=True)

    def _hidden(self, tree: Path, env: Mapping[str, str]
                ) -> tuple[list[Path], Spec | None, str]:
        """How the agent is isolated: its sandbox (the checkout writable, the target's
        folder hidden, the rest read-only), else the paths to hide in a mount namespace."""
        spec = spec_for(self.target, tree, env, network=True)
        if spec is not None:
            return [], spec, "private checkout, sandbox"
        ok, _why = mount_isolation_available()
        if not ok:
            return [], None, "private checkout"
        return hidden_paths(self.target, tree), None, "private checkout, mount namespace"

    def _env(self) -> dict[str, str]:
        src = keys.environ() if self._environ is None else self._environ
        extra = {k: src[k] for k in self.env_names if k in src}
        return scrubbed_env(self.target.env, extra, base=src)

    def _run_once(self, context: ProposalContext, name: str, note: str) -> AgentRun:
        tree, base, dispose = self._checkout(context)
        try:
            brief = self.brief_text(context, note)
            self.last_brief = brief
            brief_file = tree / BRIEF_NAME
            hyp_file = tree / HYPOTHESIS_NAME
            brief_file.write_text(brief, encoding="utf-8")
            hyp_file.unlink(missing_ok=True)
            files = sorted(context.files) or sorted(
                incumbent_files(self.target, context.incumbent.commit))
            values = {"brief_file": str(brief_file), "brief_name": BRIEF_NAME, "brief": brief,
                      "hypothesis_file": str(hyp_file), "worktree": str(tree),
                      "files": "\0".join(files), "model": self.model}
            cmd = render_command(self.command, values)
            env = self._env()
            hide, spec, isolation = self._hidden(tree, env)
            with tempfile.TemporaryDirectory(prefix="assay-agent-log-") as logs:
                try:
                    proc = run_process(cmd, cwd=tree, env=env,
                                       timeout_s=self.timeout_s,
                                       stdout_path=Path(logs) / "stdout",
                                       stderr_path=Path(logs) / "stderr", hide=hide,
                                       registry=self.target.state_dir / PROCS_DIR,
                                       sandbox=spec)
                except Exception as exc:
                    raise ProposerError(f"cannot run the agent command {cmd[:200]!r}: {exc}"
                                        ) from exc
            if proc.exit_code == 127 and "command not found" in proc.stderr:
                raise ProposerError(f"the agent command is not installed: "
                                    f"{proc.stderr.strip()[-300:]}")
            usage, said = read_usage(proc.stdout, self.model)
            hypothesis = _hypothesis(hyp_file, said or proc.stdout)
            patch, paths = self._diff(tree, base)
            return AgentRun(patch=patch, paths=paths, hypothesis=hypothesis,
                            exit_code=proc.exit_code, timed_out=proc.timed_out,
                            wall_s=proc.wall_s, stdout=proc.stdout, stderr=proc.stderr,
                            usage=usage, isolation=isolation)
        finally:
            dispose()

    def _diff(self, tree: Path, commit: str) -> tuple[str, tuple[str, ...]]:
        """The worktree's change against ``commit``, new files included, scratch dropped."""
        for name in (BRIEF_NAME, HYPOTHESIS_NAME):
            (tree / name).unlink(missing_ok=True)
        others = git(["ls-files", "--others", "--exclude-standard", "-z"], tree, plain=True,
                     binary=True, error=ProposerError).stdout
        for raw in others.split(b"\0"):
            path = raw.decode(errors="surrogateescape")
            if path and self._ignored(path):
                (tree / path).unlink(missing_ok=True)
        git(["add", "--intent-to-add", "--all", "--", "."], tree, plain=True, binary=True,
            error=ProposerError)
        names = git([*DIFF_ARGS, "--name-only", "-z", commit], tree, plain=True, binary=True,
                    error=ProposerError).stdout
        paths = tuple(p.decode(errors="surrogateescape") for p in names.split(b"\0") if p)
        patch = git([*DIFF_ARGS, commit], tree, plain=True, binary=True,
                    error=ProposerError).stdout.decode(errors="replace")
        return patch, paths

    def _ignored(self, path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
        return any(glob_match(p, g) for g in self.ignore for p in prefixes)


def _hypothesis(hyp_file: Path, output: str) -> str:
    try:
        text = hyp_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    if text:
        line = text.splitlines()[0].strip()
        m = _HYP.match(line)
        return (m.group(1) if m else line)[:300]
    found = ""
    for line in output.splitlines():
        m = _HYP.match(line)
        if m:
            found = m.group(1)
    return found[:300]


def make_proposer(target: Target, journal: Journal) -> AgentProposer:
    """The proposer ``[proposer.agent]`` describes (it needs no history)."""
    return AgentProposer.from_target(target)
