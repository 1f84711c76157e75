"""The research phase: read before proposing.

:func:`run_research` profiles the benchmark, places it on a roofline, compares the
target's code with other implementations (competitors, forks, the project's other
backends), searches documents, papers and repositories for passages about the hot spots,
and writes a ranked list of hypotheses into the journal and ``.assay/research.md``.

Configured by ``[research]`` in ``assay.toml``; every key is optional::

    [research]
    sources = ["docs/", "notes/paper.pdf"]        # documents to index
    repos = ["https://github.com/x/fork.git"]     # competitors and forks (cloned shallow)
    backends = ["src/backend-cuda"]               # the project's other backends
    focus = ["src/backend-cpu"]                   # the code to improve (default: editable)
    queries = ["rms norm fusion"]                 # extra search terms
    offline = false                               # skip arXiv and GitHub
    profile = true
    profiler = "auto"                             # auto, py-spy, cProfile, perf
    torch_profile = true                          # also torch.profiler if torch is used
    arxiv = true
    github = true
    max_papers = 5
    model = "llama 7B q4_0"                       # or flops / bytes per unit of the metric
    flops = 1.4e10
    bytes = 3.9e9
    device = "AMD EPYC 7763"                      # default: detected
    precision = "fp32"
    peak_flops = 2.0e12                           # for a device the table lacks
    bandwidth = 2.0e11
    op_prefixes = ["MYLIB_OP_"]                   # op enums without an _OP_ segment
    top = 12                                      # hypotheses to keep
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..config import Target, glob_match
from ..errors import MetricError
from .brief import Findings, ResearchHypothesis, rank, render
from .gaps import GapReport, Side, collect, compare
from .index import Hit, PassageIndex
from .profile import ProfileResult, profile_command, uses_torch
from .remote import ArxivClient, GithubClient, Paper, RemoteUnavailable, RepoHit
from .roofline import Placement, Roof, Workload, place, roof, workload
from .sources import (
    CODE_EXTS,
    Document,
    Source,
    SourceError,
    SourceReport,
    code_files,
    materialize,
    parse_source,
    read_documents,
    walk_files,
)

__all__ = [
    "ResearchConfig",
    "ResearchHypothesis",
    "ResearchResult",
    "SourceError",
    "brief_path",
    "read_brief",
    "run_research",
]


def brief_path(target: Target) -> Path:
    """Where the research brief lives: ``.assay/research.md``."""
    return target.state_dir / "research.md"


def read_brief(target: Target) -> str:
    """The research brief's text for a proposer's prompt ('' before any research)."""
    try:
        return brief_path(target).read_text(encoding="utf-8")
    except OSError:
        return ""

Progress = Callable[[str], None]


class JournalLike(Protocol):
    def add_hypothesis(self, text: str, sources: Sequence[str], source_kind: str,
                       score: float = 0.0) -> int: ...


@dataclass(frozen=True)
class ResearchConfig:
    sources: tuple[str, ...] = ()
    repos: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    focus: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    offline: bool = False
    profile: bool = True
    profiler: str = "auto"
    torch_profile: bool = True
    arxiv: bool = True
    github: bool = True
    arxiv_url: str = ""
    github_url: str = ""
    max_papers: int = 5
    model: str = ""
    flops: float | None = None
    bytes: float | None = None
    device: str = ""
    precision: str = ""
    peak_flops: float | None = None
    bandwidth: float | None = None
    op_prefixes: tuple[str, ...] = ()
    top: int = 12

    @classmethod
    def from_target(cls, target: Target) -> ResearchConfig:
        sec = target.section("research")
        cfg = cls(
            sources=sec.strings("sources", ()),
            repos=sec.strings("repos", ()),
            backends=sec.strings("backends", ()),
            focus=sec.strings("focus", ()),
            queries=sec.strings("queries", ()),
            offline=sec.get("offline", bool, False),
            profile=sec.get("profile", bool, True),
            profiler=sec.choice("profiler", ("auto", "py-spy", "cProfile", "perf"), "auto"),
            torch_profile=sec.get("torch_profile", bool, True),
            arxiv=sec.get("arxiv", bool, True),
            github=sec.get("github", bool, True),
            arxiv_url=sec.get("arxiv_url", str, ""),
            github_url=sec.get("github_url", str, ""),
            max_papers=sec.number("max_papers", 5, low=0, high=50, integer=True),
            model=sec.get("model", str, ""),
            flops=sec.number("flops", None, low=0.0),
            bytes=sec.number("bytes", None, low=0.0),
            device=sec.get("device", str, ""),
            precision=sec.choice("precision", ("fp64", "fp32", "tf32", "bf16", "fp16",
                                               "fp8"), ""),
            peak_flops=sec.number("peak_flops", None, low=0.0),
            bandwidth=sec.number("bandwidth", None, low=0.0),
            op_prefixes=sec.strings("op_prefixes", ()),
            top=sec.number("top", 12, low=1, high=200, integer=True),
        )
        for key in ("flops", "bytes", "peak_flops", "bandwidth"):
            value = getattr(cfg, key)
            if value is not None and value <= 0:
                raise sec.error(key, "must be above zero", "a positive number")
        sec.reject_unknown()
        return cfg


@dataclass
class ResearchResult:
    brief_path: Path
    brief: str
    hypotheses: list[ResearchHypothesis]
    profile: ProfileResult | None
    roof: Roof | None
    workload: Workload | None
    placement: Placement | None
    gaps: list[tuple[str, GapReport]]
    hits: list[Hit]
    papers: list[Paper] = field(default_factory=list)
    repos: list[RepoHit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources_read: list[str] = field(default_factory=list)
    passages: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brief_path": str(self.brief_path),
            "hypotheses": [asdict(h) for h in self.hypotheses],
            "profile": None if self.profile is None else {
                "profiler": self.profile.profiler, "samples": self.profile.samples,
                "notes": self.profile.notes,
                "hotspots": [asdict(h) for h in self.profile.hotspots],
                "operators": [asdict(h) for h in self.profile.operators]},
            "roof": None if self.roof is None else asdict(self.roof),
            "workload": None if self.workload is None else asdict(self.workload),
            "placement": None if self.placement is None else asdict(self.placement),
            "gaps": [{"kind": kind, "have": rep.a.label, "lack": rep.b.label,
                      "only_have": [_gap_json(g) for g in rep.only_a],
                      "only_lack": [_gap_json(g) for g in rep.only_b]}
                     for kind, rep in self.gaps],
            "passages": self.passages,
            "hits": [{"citation": h.passage.citation, "kind": h.passage.kind,
                      "query": h.query, "score": h.score} for h in self.hits],
            "papers": [asdict(p) for p in self.papers],
            "repos": [asdict(r) for r in self.repos],
            "notes": self.notes,
            "sources_read": self.sources_read,
        }


def _gap_json(g: Any) -> dict[str, Any]:
    return {"kind": g.kind, "key": g.key, "note": g.note,
            "evidence": [e.cite for e in g.evidence],
            "parts_present": [e.cite for e in g.parts_present]}


def run_research(target: Target, journal: JournalLike | None, *,
                 extra_sources: Sequence[str] = (), offline: bool | None = None,
                 profile: bool = True, progress: Progress | None = None,
                 arxiv_url: str | None = None, github_url: str | None = None,
                 min_interval_s: float | None = None) -> ResearchResult:
    """Research the target; store hypotheses in ``journal``; write ``.assay/research.md``.

    ``offline`` (None: from ``[research]``) skips arXiv and GitHub and any clone not yet
    cached. Remote failures become notes in the brief, never exceptions.
    """
    say = progress or (lambda _msg: None)
    cfg = ResearchConfig.from_target(target)
    offline = cfg.offline if offline is None else offline
    root = target.root
    state = target.state_dir
    notes: list[str] = []
    report = SourceReport()

    # -- sources ------------------------------------------------------------------
    specs: list[tuple[str, str | None]] = []
    specs += [(s, None) for s in cfg.sources]
    specs += [(s, "fork") for s in cfg.repos]
    specs += [(s, "backend") for s in cfg.backends]
    specs += [(s, None) for s in extra_sources]
    sources: list[tuple[Source, Path]] = []
    for spec, kind in specs:
        src = parse_source(spec, root, kind)
        try:
            if src.is_url:
                say(f"cloning {src.location}")
            sources.append((src, materialize(src, state, offline=offline)))
        except SourceError as exc:
            notes.append(str(exc))

    # -- profile ------------------------------------------------------------------
    prof: ProfileResult | None = None
    metric_value: float | None = None
    if profile and cfg.profile:
        from ..process import scrubbed_env

        say("profiling the benchmark")
        editable_files = _focus_files(target, cfg)
        prof = profile_command(
            target.bench.cmd, root, env=scrubbed_env(target.env),
            timeout_s=target.bench.timeout_s * 1.5 + 30, prefer=cfg.profiler,
            torch=cfg.torch_profile and uses_torch(root, editable_files))
        metric_value = _metric_from(target, prof)
        if prof.profiler == "perf" and prof.hotspots:
            _locate_symbols(prof, _focus_side(target, cfg))
    else:
        notes.append("profiling was turned off: hot spots unknown")

    # -- roofline -----------------------------------------------------------------
    from ..model import Direction

    work = workload(cfg.flops, cfg.bytes, cfg.model)
    the_roof = roof(cfg.device, cfg.precision, cfg.peak_flops, cfg.bandwidth)
    placement = place(work, the_roof, metric_value,
                      rate=target.metric.direction is Direction.MAXIMIZE,
                      measured_under=prof.profiler if prof is not None else "")

    # -- gaps ---------------------------------------------------------------------
    gap_reports: list[tuple[str, GapReport]] = []
    code_sources = [(s, p) for s, p in sources if s.kind in ("fork", "backend") and p.is_dir()]
    if code_sources:
        say("comparing implementations")
        for src, path in code_sources:
            top = path / src.subdir if src.subdir else path
            other = collect(top, src.name, op_prefixes=cfg.op_prefixes)
            if not other.files:
                notes.append(f"{src.name}: no code files to compare")
                continue
            # collected afresh: comparing classifies definitions with both vocabularies
            gap_reports.append((src.kind, compare(other, _focus_side(target, cfg))))

    # -- remote -------------------------------------------------------------------
    queries = _queries(target, cfg, prof, gap_reports)
    papers: list[Paper] = []
    repos: list[RepoHit] = []
    cache = state / "research" / "cache"
    if offline:
        notes.append("offline: arXiv and GitHub were not searched")
    else:
        kw: dict[str, Any] = {}
        if min_interval_s is not None:
            kw["min_interval_s"] = min_interval_s
        if cfg.arxiv and cfg.max_papers:
            client = ArxivClient(cache, base_url=arxiv_url or cfg.arxiv_url or
                                 "https://export.arxiv.org/api/query", **kw)
            for q in queries[:3]:
                say(f"searching arXiv: {q}")
                try:
                    papers.extend(client.search(q, cfg.max_papers))
                except RemoteUnavailable as exc:
                    notes.append(str(exc))
                    break
        if cfg.github:
            gh = GithubClient(cache, base_url=github_url or cfg.github_url or
                              "https://api.github.com", **kw)
            for q in queries[:1]:
                say(f"searching GitHub: {q}")
                try:
                    repos.extend(gh.search_repos(q, 5))
                except RemoteUnavailable as exc:
                    notes.append(str(exc))
    papers = list({p.id: p for p in papers}.values())

    # -- index --------------------------------------------------------------------
    say("indexing sources")
    docs: list[Document] = []
    for src, path in sources:
        docs.extend(read_documents(src, path, report))
    for p in papers:
        docs.append(Document(Source(p.url, "paper", label=p.url), p.url,
                             (p.title, "", *_wrap(p.summary)), "paper", title=p.title))
    index = PassageIndex.build(docs)
    hits: list[Hit] = []
    for q in queries:
        hits.extend(index.search(q, k=3))
    hits.sort(key=lambda h: -h.score)
    notes.extend(report.skipped[:20])

    # -- brief ------------------------------------------------------------------------
    ev = Findings(target=target.run.name or root.name, metric=target.metric.name,
                  profile=prof, roof=the_roof, workload=work, placement=placement,
                  gaps=gap_reports, hits=hits, papers=papers, repos=repos,
                  sources_read=report.read, notes=notes, editable=target.editable)
    hyps = rank(ev, top=cfg.top)
    if journal is not None:
        # one idea, one hypothesis: a re-run whose numbers moved keeps the stored one
        known: dict[tuple[str, tuple[str, ...]], int] = {}
        listing = getattr(journal, "hypotheses", None)
        if callable(listing):
            for old in listing():
                known.setdefault((old.source_kind, tuple(old.sources)), old.id)
        for h in hyps:
            same = known.get((h.source_kind, tuple(h.sources)))
            h.id = same if same is not None else journal.add_hypothesis(
                h.text, h.sources, h.source_kind, h.score)
        event = getattr(journal, "event", None)
        if callable(event):
            event("research", f"research: {len(hyps)} hypotheses, "
                  f"{len(index)} passages, profiler {prof.profiler if prof else 'off'}",
                  hypotheses=[h.id for h in hyps], brief=".assay/research.md")
    text = render(ev, hyps)
    state.mkdir(parents=True, exist_ok=True)
    path = brief_path(target)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    (state / "research").mkdir(parents=True, exist_ok=True)
    result = ResearchResult(path, text, hyps, prof, the_roof, work, placement,
                            gap_reports, hits, papers, repos, notes, report.read, len(index))
    (state / "research" / "last.json").write_text(
        json.dumps({"at": time.time(), **result.to_json()}, indent=1, default=str),
        encoding="utf-8")
    return result


def _wrap(text: str, width: int = 100) -> list[str]:
    lines: list[str] = []
    cur = ""
    for word in text.split():
        if len(cur) + len(word) + 1 > width and cur:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    if cur:
        lines.append(cur)
    return lines


def _focus_files(target: Target, cfg: ResearchConfig) -> list[Path]:
    """The target's own code: ``focus`` dirs/globs, else the editable globs."""
    root = target.root
    out: list[Path] = []
    if cfg.focus:
        for item in cfg.focus:
            p = (root / item)
            if p.is_dir():
                out.extend(f for f in walk_files(p) if f.suffix in CODE_EXTS)
            elif p.is_file():
                out.append(p)
            else:
                out.extend(code_files(root, [item]))
        return sorted(set(out))
    for f in walk_files(root):
        if f.suffix in CODE_EXTS and any(
                glob_match(f.relative_to(root).as_posix(), g) for g in target.editable):
            out.append(f)
    return out


def _focus_side(target: Target, cfg: ResearchConfig) -> Side:
    files = _focus_files(target, cfg)
    label = cfg.focus[0].rstrip("/").rsplit("/", 1)[-1] if len(cfg.focus) == 1 else \
        (target.run.name or target.root.name)
    return collect(target.root, label, files=files, op_prefixes=cfg.op_prefixes,
                   cite_base=target.root, cite_prefix="")


_SYMBOL_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv)\.\d+)+$")


def _locate_symbols(prof: ProfileResult, focus: Side) -> None:
    """Point native hot spots (perf gives a library) at their definitions in the code."""
    where: dict[str, list[tuple[str, int]]] = {}
    for name, ev in focus.defs:
        where.setdefault(name, []).append((ev.path, ev.line))
    for i, h in enumerate(prof.hotspots):
        bare = _SYMBOL_SUFFIX.sub("", h.function.split("(", 1)[0]).rsplit("::", 1)[-1]
        found = _this_arch(where.get(bare, []))
        if found is not None:
            prof.hotspots[i] = replace(h, file=found[0], line=found[1], in_target=True)
        elif h.in_target:
            prof.hotspots[i] = replace(h, in_target=False)


_ARCH_TAGS = {
    "x86_64": {"x86", "x86_64", "amd64", "x64"}, "amd64": {"x86", "x86_64", "amd64", "x64"},
    "aarch64": {"arm", "arm64", "aarch64"}, "arm64": {"arm", "arm64", "aarch64"},
    "ppc64le": {"powerpc", "ppc", "ppc64"}, "riscv64": {"riscv", "rv64"},
    "s390x": {"s390", "s390x"}, "loongarch64": {"loongarch"},
}
_ALL_ARCH = set().union(*_ARCH_TAGS.values()) | {"wasm"}


def _this_arch(places: Sequence[tuple[str, int]]) -> tuple[str, int] | None:
    """Of several definitions of one symbol, the one built for this machine."""
    if len(places) <= 1:
        return places[0] if places else None
    import platform

    mine = _ARCH_TAGS.get(platform.machine().lower(), set())
    for path, line in places:
        if mine & set(path.lower().split("/")):
            return path, line
    for path, line in places:
        if not _ALL_ARCH & set(path.lower().split("/")):
            return path, line
    return places[0]


def _metric_from(target: Target, prof: ProfileResult) -> float | None:
    if not prof.stdout:
        return None
    from ..metrics import read_metric

    try:
        return read_metric(target.metric, prof.stdout, target.root)
    except (MetricError, OSError, ValueError):
        return None


def _queries(target: Target, cfg: ResearchConfig, prof: ProfileResult | None,
             gaps: Sequence[tuple[str, GapReport]]) -> list[str]:
    from .gaps import split_words

    # declared queries first, then missing fusions, then hot spots: the first few also
    # go to arXiv and GitHub, where a bare function name finds little
    out: list[str] = list(cfg.queries)
    for _kind, rep in gaps:
        for g in rep.only_a[:2]:
            if g.kind == "fusion":
                out.append(" ".join(g.key.replace("+", " ").replace("_", " ").split())
                           + " fusion")
    if prof is not None:
        for h in prof.hotspots[:3]:
            words = [w for w in split_words(h.function) if len(w) > 2]
            if words:
                out.append(" ".join(words))
    out.append(" ".join(split_words(target.metric.name)) or target.metric.name)
    return list(dict.fromkeys(q for q in out if q.strip()))
