"""What a candidate goes through before it is queued: its link to a journal hypothesis, the
reasons to reject it before any run, and its patch merged onto the incumbent."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..bench.contain import UNCONFINED
from ..config.spec import Target
from ..errors import PatchError, WorkspaceError
from ..journal.store import Journal
from ..model import WRITTEN_DIGEST, Candidate, ExperimentState, Incumbent, ParamValue
from ..repo.merge import merge_onto
from ..repo.repository import Repository
from ..repo.workspace import check_scope, held_params
from .sessions import SessionOptions

_HYP_REF = re.compile(r"^\s*\[?H(\d+)\]?\s*[:.)\-]")


@dataclass(frozen=True)
class Admission:
    """A candidate as it is queued, or rejected before any run (``reason``) as ``state``."""

    candidate: Candidate
    reason: str = ""
    state: ExperimentState = ExperimentState.QUEUED


_STRING = re.compile(r"""("|')(?:\\.|(?!\1).)*\1""")


def binding_line(patch: str, name: str, file: str | None) -> str | None:
    """The first line ``patch`` adds or removes that could set the parameter ``name`` behind
    assay's back, None when there is none.

    In ``file`` (where an assigned parameter has its line ``NAME = ...``): any statement
    that binds the name (assigned, augmented, annotated, unpacked, walrus, ``for``,
    ``import ... as``, ``global``, ``del``). In every file: the name as a string (``globals()``,
    ``setattr``, ``os.environ``: the only way to reach an environment parameter, ``file``
    None) and an attribute ``.NAME = ...`` (another module setting it). Lines that only read
    it pass; a candidate that reads it to train longer is beyond what the text can show."""
    word = rf"(?<![\w.]){re.escape(name)}(?!\w)"
    quoted = re.compile(rf"[\"']{re.escape(name)}[\"']")
    attribute = re.compile(rf"\.{re.escape(name)}\s*(?:[-+*/%@&|^]|//|\*\*|<<|>>)?=(?!=)")
    binds = re.compile(rf"^\s*(?:global|nonlocal|del)\b.*{word}"
                       rf"|\bas\s+{word}|^\s*(?:from\s+\S+\s+)?import\b.*{word}"
                       rf"|\bfor\s+[^:]*?{word}[^:]*?\s+in\b|{word}\s*:=")
    current = ""
    for text in patch.splitlines():
        if text.startswith("diff --git "):
            current = ""
        elif text.startswith("+++ "):
            current = text[4:].strip().removeprefix("b/")
        elif text[:1] in "+-" and not text.startswith("--- ") and current:
            line = text[1:]
            if quoted.search(line) or attribute.search(line):
                return text
            if current != file:
                continue
            code = _STRING.sub('""', line).split("#", 1)[0]
            for statement in code.split(";"):
                bound = _binding_side(statement)
                if binds.search(statement) or (bound is not None
                                               and re.search(word, bound)):
                    return text
    return None


def _binding_side(line: str) -> str | None:
    """The text left of the first ``=`` of ``line`` that binds (not ``==``, ``<=``, ``>=``,
    ``!=``), None when there is none."""
    for i, ch in enumerate(line):
        if ch != "=":
            continue
        before = line[i - 1] if i else ""
        after = line[i + 1] if i + 1 < len(line) else ""
        if after == "=" or before in "=<>!":
            continue
        return line[:i]
    return None


class Intake:
    """Checks candidates for one loop's target, journal and repository."""

    def __init__(self, target: Target, journal: Journal, ws: Repository,
                 incumbent: Callable[[], Incumbent]) -> None:
        self.target = target
        self.journal = journal
        self.ws = ws
        self.incumbent = incumbent

    def admit(self, cand: Candidate, session: SessionOptions) -> Admission:
        """The candidate as it is queued, or why it is rejected and as what."""
        cand = self.link_hypothesis(cand)
        if session.unconfined:  # shown on the experiment by `show`, status, the report
            cand = dataclasses.replace(cand, meta={**cand.meta, UNCONFINED: True})
        reason = self.reject_reason(cand, session.retry)  # the patch as proposed: its scope
        if reason:
            return Admission(cand, reason, ExperimentState.INVALID)
        cand, conflict = self.merged(cand)
        if conflict:
            return Admission(cand, conflict, ExperimentState.CONFLICT)
        return Admission(cand)

    def link_hypothesis(self, cand: Candidate) -> Candidate:
        """Link a candidate whose hypothesis names a journal hypothesis (``H4: ...``) to it."""
        if cand.hypothesis_id is not None:
            return cand
        m = _HYP_REF.match(cand.hypothesis)
        if not m:
            return cand
        hid = int(m.group(1))
        known = {h.id: h for h in self.journal.hypotheses()}
        if hid not in known:
            return cand
        sources = tuple(dict.fromkeys((*cand.sources, *known[hid].sources)))
        return dataclasses.replace(cand, hypothesis_id=hid, sources=sources)

    def merged(self, cand: Candidate) -> tuple[Candidate, str]:
        """The candidate's patch merged onto the incumbent (:mod:`assay.repo.merge`), and on a
        conflict the reason: ``conflict: <files> ...``."""
        if not cand.patch.strip():
            return cand, ""
        inc = self.incumbent()
        try:
            merged = merge_onto(self.target.root, cand.patch, inc.commit)
        except WorkspaceError:
            return cand, ""  # not a git repository here: applied as it stands
        if merged is None:
            return cand, ""
        if merged.conflicts:
            return cand, merged.conflict_note(inc.commit)
        meta = {**cand.meta, WRITTEN_DIGEST: cand.written_digest}
        return dataclasses.replace(cand, patch=merged.patch, meta=meta), ""

    def reject_reason(self, cand: Candidate, retry: bool) -> str:
        """Why ``cand`` is rejected before any run: its scope, its parameters, a repeat."""
        if cand.meta.get("rejected"):
            return str(cand.meta["rejected"])
        if cand.is_empty():
            return "the candidate changes nothing"
        inc = self.incumbent()
        if not cand.patch.strip() and cand.base_commit == inc.commit \
                and self._holds(inc, cand.params):
            return "the candidate changes nothing: its parameter values are the incumbent's"
        dup = self.journal.find_digest(cand.written_digest)
        if dup and not retry:
            return f"identical to {dup}, already tried"
        try:
            if cand.patch.strip():
                check_scope(cand.patch, self.target)
            declared = {p.name for p in self.target.params}
            unknown = set(cand.params) - declared
            if unknown:
                return f"sets undeclared parameters {sorted(unknown)}"
            fid = self.target.fidelity
            if fid is not None and fid.param in cand.params:
                return (f"sets the fidelity parameter {fid.param} (to "
                        f"{cand.params[fid.param]!r}): assay sets it per level ([fidelity] "
                        f"levels = {list(fid.levels)}); change anything else")
            spec = next((p for p in self.target.params if fid is not None
                         and p.name == fid.param), None)
            if fid is not None and spec is not None and (line := binding_line(
                    cand.patch, spec.name, spec.file if spec.apply == "assign" else None)):
                verb = "adds" if line.startswith("+") else "removes"
                return (f"its patch {verb} the line `{line[1:].strip()[:120]}`, which could "
                        f"set {spec.name}, the fidelity parameter: assay sets it per level "
                        f"([fidelity] levels = {list(fid.levels)}); change anything else")
        except PatchError as exc:
            return str(exc)
        return ""

    def _holds(self, inc: Incumbent, params: Mapping[str, ParamValue]) -> bool:
        """Whether ``inc`` already holds every value in ``params``: assay's own values, else
        the line of an assigned parameter's file at its commit (read only when needed)."""
        rest: dict[str, ParamValue] = {}
        for name, value in params.items():
            if name not in inc.params:
                rest[name] = value
            elif inc.params[name] != value:
                return False
        if not rest:
            return True

        def read(path: str) -> str | None:
            try:
                return self.ws.file_at(inc.commit, path)
            except WorkspaceError:
                return None

        specs = [p for p in self.target.params if p.name in rest]
        held = held_params(specs, {}, read)
        return all(held.get(k) == v for k, v in rest.items())
