"""Reviewers: a second look at each group before it becomes a pull request.

A reviewer is one small object, pluggable like a proposer::

    review(request) -> list[Finding]

The :class:`Request` holds the group's diff, the code around every change (with line
numbers) and the other places the changed names are used, the project's contribution
notes (``CONTRIBUTING*``, ``docs/``) when the repository has them, and
:data:`CHECKLIST`, the hazards optimizations are known for. Reviewers, chosen in
``[finalize.review] reviewer``:

- ``"none"`` (default): no review;
- ``"command"``: ``command`` runs with bash in a worktree holding merge-base + group
  (a linter, a sanitizer build running the checks, a script of your own). It gets
  ``ASSAY_REVIEW_FILE`` (the request as JSON) and ``ASSAY_DIFF_FILE``; it reports findings
  as lines ``path:line[:col]: severity: message`` (severity ``error``/``blocking``,
  ``warning`` or ``note``; sanitizers' ``runtime error`` and ``SUMMARY: ...Sanitizer``
  lines are read as blocking), or as the JSON the LLM returns. A non-zero exit without a
  finding is one blocking finding that quotes the output;
- ``"llm"``: the chat model of ``[proposer.llm]`` reads the request and answers JSON;
- ``"agent"``: ``command`` (a coding-agent CLI, e.g. ``claude -p``) runs in the worktree with
  the request in ``.assay-review.md`` and answers the same JSON on stdout.

The JSON: ``{"findings": [{"file": "src/k.c", "line": 12, "severity": "blocking",
"message": "..."}]}``. Any other reply is a :class:`~assay.errors.ReviewError`.

Finding ids are stable (a hash of reviewer, file, line and message), so ``assay finalize
--waive ID`` on a later run waives the same finding.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import keys
from ..bench import contain, process
from ..bench.meter import prompt_tokens
from ..config.section import Section
from ..config.spec import Target
from ..errors import ProposerError, ReviewError
from ..proposers.llm import LLMProposer
from ..registry import REVIEWERS
from ..repo.git import git
from ..usage import Usage

REVIEW_SYSTEM = ("You review performance optimizations for correctness against a project's "
                 "conventions. Answer only with the JSON object asked for.")

CHECKLIST: tuple[str, ...] = (
    "an intermediate with other consumers: a fused or removed write whose value is still "
    "read elsewhere (check every use of the buffer or variable, not only the fused pattern)",
    "aliasing and in-place writes: an output that may overlap an input; an in-place update "
    "of data another caller still holds",
    "thread safety and reductions: shared state written from several threads; a parallel "
    "reduction whose order (and so its rounding) changed",
    "edge sizes: empty input, size 1, odd sizes, sizes that are not a multiple of the vector "
    "width or the block size (tails and remainders)",
    "NaN and Inf: comparisons, max/min and fast-math rewrites that change their handling",
    "precision changes: a narrower type, a different accumulation type, an approximation",
    "platform-specific code without a fallback: intrinsics, a GPU-only path, an OS call",
)
SEVERITIES = ("blocking", "warning", "note")
REVIEW_NAME = ".assay-review.md"
_LINE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(?::\d+)?:\s*"
                   r"(?:(?P<sev>fatal error|error|blocking|warning|note|runtime error)\s*:?\s*)?"
                   r"(?P<msg>.+)$", re.IGNORECASE)
_SUMMARY = re.compile(r"SUMMARY:\s*(?P<tool>\w*Sanitizer):\s*(?P<kind>\S+)\s+"
                      r"(?P<file>[^\s:]+):(?P<line>\d+)")
_SEV = {"fatal error": "blocking", "error": "blocking", "blocking": "blocking",
        "runtime error": "blocking", "warning": "warning", "note": "note"}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    severity: str  # blocking / warning / note
    message: str
    reviewer: str
    group: str = ""
    id: str = ""

    @property
    def blocking(self) -> bool:
        return self.severity == "blocking"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def finding(file: str, line: int, severity: str, message: str, reviewer: str,
            group: str) -> Finding:
    key = f"{reviewer}\0{file}\0{line}\0{message.strip()}"
    fid = "R" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return Finding(file, line, severity, message.strip(), reviewer, group, fid)


@dataclass(frozen=True)
class Request:
    group: str
    title: str
    diff: str
    surrounding: str  # numbered code around each change, and the other uses of changed names
    notes: str  # the project's contribution notes ('' if none)
    checklist: tuple[str, ...] = CHECKLIST
    files: tuple[str, ...] = ()
    worktree: str = ""  # merge-base + group, for reviewers that run something

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def prompt(self) -> str:
        items = "\n".join(f"- {c}" for c in self.checklist)
        notes = self.notes or "(the repository has no contribution notes)"
        return (
            f"Review this change ({self.group}: {self.title}) as a maintainer would before "
            "merging it. It is an optimization that passed the project's checks and "
            "benchmark; look for what those miss.\n\n"
            f"## Hazards to check, one by one\n{items}\n\n"
            f"## The project's contribution notes\n{notes}\n\n"
            f"## The diff\n```diff\n{self.diff}\n```\n\n"
            f"## The code around the change, and other uses of the names it touches\n"
            f"{self.surrounding}\n\n"
            "## Answer\nOnly a JSON object: {\"findings\": [{\"file\": \"path\", \"line\": N, "
            "\"severity\": \"blocking\" | \"warning\" | \"note\", \"message\": \"...\"}]}. "
            "blocking: the change is wrong or breaks a rule of the project; an empty list "
            "when you find nothing.")


class Reviewer(ABC):
    name: str = "base"

    @abstractmethod
    def review(self, request: Request) -> list[Finding]:
        """The findings on one group; [] when there are none."""

    def used(self) -> list[Usage]:
        """The model calls made since the last time this was asked (each given once), for
        the journal's account of what the run spent."""
        return []

    def worst_call(self, request: Request) -> tuple[str, int, int] | None:
        """The model call reviewing ``request`` would make, at its worst: the model, the
        prompt's tokens and the most reply tokens; None when it makes no counted call. The
        spending caps are checked with it before the review."""
        return None


# ------------------------------------------------------------------ reading findings


def parse_json(text: str, reviewer: str, group: str) -> list[Finding] | None:
    """Findings from the JSON answer, or None when the text holds no JSON object."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ReviewError(f"reviewer {reviewer} on {group}: the JSON has no \"findings\" list: "
                          f"{text[start:end + 1][:300]!r}")
    out: list[Finding] = []
    for i, f in enumerate(data["findings"]):
        where = f"reviewer {reviewer} on {group}: finding {i + 1}"
        if not isinstance(f, dict):
            raise ReviewError(f"{where} is not an object: {f!r}")
        file, line, sev, msg = f.get("file"), f.get("line"), f.get("severity"), f.get("message")
        if not isinstance(file, str) or not file:
            raise ReviewError(f"{where}: \"file\" must be a path, got {file!r}")
        if isinstance(line, bool) or not isinstance(line, int) or line < 0:
            raise ReviewError(f"{where}: \"line\" must be a line number, got {line!r}")
        if sev not in SEVERITIES:
            raise ReviewError(f"{where}: \"severity\" must be one of {', '.join(SEVERITIES)}, "
                              f"got {sev!r}")
        if not isinstance(msg, str) or not msg.strip():
            raise ReviewError(f"{where}: \"message\" must be a non-empty string")
        out.append(finding(file, line, sev, msg, reviewer, group))
    return out


def parse_lines(text: str, reviewer: str, group: str, tree: str = "") -> list[Finding]:
    """Compiler-, linter- and sanitizer-style lines: ``path:line[:col]: severity: message``."""
    out: list[Finding] = []
    prefix = tree.rstrip("/") + "/" if tree else ""
    for raw in text.splitlines():
        line = raw.strip()
        m = _SUMMARY.search(line)
        if m:
            out.append(finding(_rel(m["file"], prefix), int(m["line"]), "blocking",
                               f"{m['tool']}: {m['kind']}", reviewer, group))
            continue
        m = _LINE.match(line)
        if not m or m["file"].startswith(("http", "#")):
            continue
        sev = _SEV.get((m["sev"] or "warning").lower(), "warning")
        out.append(finding(_rel(m["file"], prefix), int(m["line"]), sev, m["msg"], reviewer,
                           group))
    return out


def _rel(path: str, prefix: str) -> str:
    if prefix and path.startswith(prefix):
        return path[len(prefix):]
    return path[2:] if path.startswith("./") else path


# ------------------------------------------------------------------ the reviewers


class CommandReviewer(Reviewer):
    name = "command"

    def __init__(self, target: Target, command: str, timeout_s: float = 1800.0) -> None:
        self.target = target
        self.command = command
        self.timeout_s = timeout_s

    def review(self, request: Request) -> list[Finding]:
        tree = Path(request.worktree)
        logs = self.target.state_dir / "finalize" / "review" / request.group
        logs.mkdir(parents=True, exist_ok=True)
        req_file, diff_file = logs / "request.json", logs / "diff.patch"
        req_file.write_text(json.dumps(request.as_dict(), indent=1))
        diff_file.write_text(request.diff)
        env = process.scrubbed_env(self.target.env, {"ASSAY_REVIEW_FILE": str(req_file),
                                                     "ASSAY_DIFF_FILE": str(diff_file),
                                                     "ASSAY_GROUP": request.group})
        r = process.run(self.command, cwd=tree, env=env, timeout_s=self.timeout_s,
                        stdout_path=logs / "out.txt", stderr_path=logs / "err.txt",
                        limits=self.target.limits,
                        sandbox=contain.spec_for(self.target, tree, env,
                                                 readable=(req_file, diff_file)))
        text = (r.stdout or "") + "\n" + (r.stderr or "")
        if r.timed_out:
            raise ReviewError(f"review command {self.command!r} on {request.group} timed out "
                              f"after {self.timeout_s:g}s (logs: {logs})")
        found = parse_json(r.stdout or "", self.name, request.group)
        if found is None:
            found = parse_lines(text, self.name, request.group, str(tree))
        if r.exit_code != 0 and not any(f.blocking for f in found):
            tail = " | ".join(text.strip().splitlines()[-3:])
            found.append(finding(f"({shlex.split(self.command)[0]})", 0, "blocking",
                                 f"the review command exited {r.exit_code}: {tail}", self.name,
                                 request.group))
        return found


class LLMReviewer(Reviewer):
    name = "llm"

    def __init__(self, client: Any) -> None:
        self.client = client
        self._used: list[Usage] = []

    @classmethod
    def from_target(cls, target: Target) -> LLMReviewer:
        return cls(LLMProposer.from_target(target).client)

    def worst_call(self, request: Request) -> tuple[str, int, int] | None:
        settings = self.client.settings
        return (settings.model, prompt_tokens(REVIEW_SYSTEM, request.prompt()),
                settings.max_tokens)

    def review(self, request: Request) -> list[Finding]:
        try:
            reply = self.client.complete(REVIEW_SYSTEM,
                                         [{"role": "user", "content": request.prompt()}])
        except ProposerError as exc:
            raise ReviewError(f"reviewer llm on {request.group}: {exc}") from None
        self._used.append(Usage(reply.model, reply.tokens_in, reply.tokens_out,
                                reply.tokens_cached, reply.tokens_cache_write,
                                estimated=reply.tokens_estimated))
        found = parse_json(reply.text, self.name, request.group)
        if found is None:
            raise ReviewError(f"reviewer llm on {request.group}: the reply holds no JSON object "
                              f"with findings: {reply.text[:300]!r}")
        return found

    def used(self) -> list[Usage]:
        out, self._used = self._used, []
        return out


class AgentReviewer(Reviewer):
    name = "agent"
    PRESETS: Mapping[str, str] = {
        "claude": "claude -p --output-format text \"Read the review task in "
                  f"{REVIEW_NAME} and answer as it asks.\"",
        "codex": f"codex exec \"Read the review task in {REVIEW_NAME} and answer as it asks.\"",
    }

    def __init__(self, target: Target, command: str, timeout_s: float = 1800.0,
                 env_names: Sequence[str] = ()) -> None:
        self.target = target
        self.command = command
        self.timeout_s = timeout_s
        self.env_names = tuple(env_names)

    def review(self, request: Request) -> list[Finding]:

        tree = Path(request.worktree)
        brief = tree / REVIEW_NAME
        brief.write_text(request.prompt())
        logs = self.target.state_dir / "finalize" / "review" / request.group
        logs.mkdir(parents=True, exist_ok=True)
        src = keys.environ()
        env = process.scrubbed_env(self.target.env, {k: src[k] for k in self.env_names
                                                     if k in src})
        try:
            r = process.run(self.command, cwd=tree, env=env, timeout_s=self.timeout_s,
                            stdout_path=logs / "agent.out", stderr_path=logs / "agent.err",
                            limits=self.target.limits,
                            sandbox=contain.spec_for(self.target, tree, env, network=True))
        finally:
            brief.unlink(missing_ok=True)
        if r.timed_out or r.exit_code != 0:
            tail = " | ".join((r.stderr or r.stdout or "").strip().splitlines()[-3:])
            raise ReviewError(f"review agent {self.command!r} on {request.group} "
                              + ("timed out" if r.timed_out else f"exited {r.exit_code}")
                              + f": {tail} (logs: {logs})")
        found = parse_json(r.stdout or "", self.name, request.group)
        if found is None:
            raise ReviewError(f"review agent on {request.group}: no JSON findings in its "
                              f"output (logs: {logs / 'agent.out'})")
        return found


def no_reviewer(target: Target, sec: Section) -> Reviewer | None:
    sec.reject_unknown(("reviewer",))
    return None


def command_reviewer(target: Target, sec: Section) -> Reviewer:
    cmd = sec.get("command", str, valid="a shell command, e.g. \"make asan-check\"")
    if not cmd.strip():
        raise sec.error("command", "must not be empty", "a shell command")
    timeout = float(sec.number("timeout_s", 1800.0, low=1.0))
    sec.reject_unknown(("reviewer",))
    return CommandReviewer(target, cmd, timeout)


def agent_reviewer(target: Target, sec: Section) -> Reviewer:
    preset = sec.choice("preset", tuple(AgentReviewer.PRESETS), "claude")
    cmd = sec.get("command", str, AgentReviewer.PRESETS[preset])
    timeout = float(sec.number("timeout_s", 1800.0, low=1.0))
    env = sec.strings("env", ())
    sec.reject_unknown(("reviewer",))
    return AgentReviewer(target, cmd, timeout, env)


def llm_reviewer(target: Target, sec: Section) -> Reviewer:
    sec.reject_unknown(("reviewer",))
    return LLMReviewer.from_target(target)


def from_target(target: Target) -> Reviewer | None:
    """The reviewer ``[finalize.review] reviewer`` names (see assay.registry), or None."""
    sec = target.section("finalize.review")
    kind = sec.choice("reviewer", REVIEWERS.names, "none")
    reviewer: Reviewer | None = REVIEWERS.get(kind)(target, sec)
    return reviewer


# ------------------------------------------------------------------ the request


def _ls(root: Path, commit: str) -> list[str]:
    return git(["ls-tree", "-r", "--name-only", commit], root).stdout.splitlines()


def contribution_notes(root: Path, commit: str, limit: int = 12_000) -> str:
    names = _ls(root, commit)
    picked = [n for n in names if "/" not in n and n.upper().startswith("CONTRIBUTING")]
    picked += sorted(n for n in names if n.startswith("docs/")
                     and n.lower().endswith((".md", ".rst", ".txt")))
    out: list[str] = []
    total = 0
    for name in picked:
        text = git(["show", f"{commit}:{name}"], root, check=False).stdout
        room = limit - total
        if room <= 200:
            out.append(f"(further notes not shown: {', '.join(picked[len(out):])})")
            break
        out.append(f"### {name}\n{text[:room]}")
        total += min(len(text), room)
    return "\n\n".join(out)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_COMMON = frozenset({"self", "return", "import", "from", "None", "True", "False", "const",
                     "void", "float", "double", "static", "inline", "struct", "while", "break",
                     "continue", "else", "elif", "class", "with", "assert", "size_t", "auto"})


def surrounding(root: Path, base: str, commit: str, files: Sequence[str],
                context: int = 15, uses_limit: int = 80) -> str:
    """Numbered code around each change in ``commit``, then other uses of changed names."""
    out: list[str] = []
    names: dict[str, None] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for f in files:
        text = git(["show", f"{commit}:{f}"], root, check=False).stdout
        if not text:
            out.append(f"### {f}: removed")
            continue
        lines = text.splitlines()
        hunks = git(["diff", "-U0", "--no-renames", base, commit, "--", f], root).stdout
        ranges: list[tuple[int, int]] = []
        for h in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", hunks, re.M):
            start, count = int(h.group(1)), int(h.group(2) or "1")
            ranges.append((max(1, start - context), min(len(lines), start + count + context)))
        for ln in hunks.splitlines():
            if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---")):
                for w in _WORD.findall(ln[1:]):
                    if w not in _COMMON:
                        names.setdefault(w, None)
        merged: list[tuple[int, int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        spans[f] = merged
        for a, b in merged:
            body = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(a, b + 1))
            out.append(f"### {f}, lines {a}-{b}\n{body}")
    uses: list[str] = []
    for name in list(names)[:40]:
        found = git(["grep", "-n", "-w", "-F", name, commit, "--"], root, check=False).stdout
        for hit in found.splitlines():
            _, path, no, code = ([*hit.split(":", 3), "", "", ""])[:4]
            if not no.isdigit():
                continue
            inside = any(a <= int(no) <= b for a, b in spans.get(path, ()))
            if not inside:
                uses.append(f"{path}:{no}: {code.strip()}  [{name}]")
        if len(uses) >= uses_limit:
            break
    if uses:
        out.append("### other uses of the names the change touches\n"
                   + "\n".join(dict.fromkeys(uses[:uses_limit])))
    return "\n\n".join(out)


def build_request(root: Path, group: str, title: str, base: str, commit: str,
                  files: Sequence[str], worktree: Path) -> Request:
    diff = git(["diff", "--no-renames", base, commit], root).stdout
    return Request(group=group, title=title, diff=diff,
                   surrounding=surrounding(root, base, commit, files),
                   notes=contribution_notes(root, base), files=tuple(files),
                   worktree=str(worktree))


@dataclass
class ReviewResult:
    """The findings on one group and which of them still block it."""

    findings: list[Finding] = field(default_factory=list)
    waived: set[str] = field(default_factory=set)
    reviewer: str = "none"
    skipped: str = ""  # why the review was not made (a spending cap), '' when it was

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking and f.id not in self.waived]

    @property
    def blocked(self) -> bool:
        return bool(self.blocking)
