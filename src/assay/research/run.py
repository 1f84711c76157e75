"""One research run, step by step: sources, profile, roofline, gaps, fork diffs, remote
search, the passage index, then ranked hypotheses into the journal and the brief."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.metrics import read_metric
from ..bench.process import scrubbed_env
from ..config.spec import MetricSpec, Target
from ..errors import MetricError
from ..model import Direction
from .brief import Findings, hot_path_rows, rank, render
from .config import ResearchConfig
from .diffs import hot_function_diffs
from .focus import focus_files, focus_side, locate_symbols
from .gaps import GapReport, Side, collect, find_gaps, split_words
from .index import Hit, PassageIndex
from .profile import ProfileResult, profile_command, uses_torch
from .remote import ArxivClient, GithubClient, Paper, RemoteUnavailable, RepoHit
from .research_journal import ResearchJournal
from .result import ResearchResult
from .roofline import Placement, Roof, Workload, batched, place, roof, workload
from .sources import Document, Source, SourceError, SourceReport, materialize, parse_source
from .sources import read_documents as read_source_documents
from .store import store_hypotheses, write_brief
from .waves import lessons

Progress = Callable[[str], None]


@dataclass
class _Run:
    """What every step of one run shares."""

    target: Target
    cfg: ResearchConfig
    offline: bool
    say: Progress
    notes: list[str]

    @property
    def state(self) -> Path:
        return self.target.state_dir


def run_research(target: Target, journal: ResearchJournal | None, *,
                 extra_sources: Sequence[str] = (), offline: bool | None = None,
                 profile: bool = True, progress: Progress | None = None,
                 arxiv_url: str | None = None, github_url: str | None = None,
                 min_interval_s: float | None = None,
                 measure: bool | None = None) -> ResearchResult:
    """Research the target; store hypotheses in ``journal``; write ``.assay/research.md``.

    ``offline`` (None: from ``[research]``) skips arXiv and GitHub and any clone not yet
    cached; ``measure`` (None: from ``[research]``) measures the peaks even where the
    hardware table knows the device. Remote failures become notes, never exceptions.
    """
    cfg = ResearchConfig.from_target(target)
    run = _Run(target, cfg, cfg.offline if offline is None else offline,
               progress or (lambda _msg: None), [])
    report = SourceReport()
    sources = _sources(run, extra_sources)
    prof, metric_value = _profile(run, profile)
    mine = focus_side(target, cfg)
    if prof is not None and prof.profiler == "perf" and prof.hotspots:
        locate_symbols(prof, mine)
    the_roof = roof(cfg.device, cfg.precision, cfg.peak_flops, cfg.bandwidth,
                    measure=cfg.measure if measure is None else measure)
    work = workload(cfg.flops, cfg.bytes, cfg.model)
    placement = place(work, the_roof, metric_value,
                      rate=target.metric.direction is Direction.MAXIMIZE,
                      measured_under=prof.profiler if prof is not None else "")
    guards = _guard_placements(target, cfg, work, the_roof, prof)
    gap_reports, forks = _gaps(run, sources)
    diffs = hot_function_diffs(prof, mine, forks) if prof is not None else []
    papers, repos = _remote(run, prof, gap_reports, arxiv_url, github_url, min_interval_s)
    hits, passages = _index(run, sources, papers, report, prof, gap_reports)
    ev = Findings(target=target.run.name or target.root.name, metric=target.metric.name,
                  profile=prof, roof=the_roof, workload=work, placement=placement,
                  guard_placements=guards,
                  gaps=gap_reports, hits=hits, papers=papers, repos=repos,
                  sources_read=report.read, notes=run.notes, editable=target.editable,
                  diffs=diffs, lessons=lessons(journal, target) if journal else [])
    hyps = rank(ev, top=cfg.top)
    if journal is not None:
        store_hypotheses(journal, hyps)
        journal.event("research", f"research: {len(hyps)} hypotheses, {passages} passages, "
                      f"profiler {prof.profiler if prof else 'off'}",
                      hypotheses=[h.id for h in hyps], brief=".assay/research.md")
    text = render(ev, hyps)
    path = write_brief(target, text)
    result = ResearchResult(path, text, hyps, prof, the_roof, work, placement, gap_reports,
                            hits, papers, repos, run.notes, report.read, passages,
                            diffs=diffs, hot_path=hot_path_rows(ev), guard_placements=guards)
    (run.state / "research").mkdir(parents=True, exist_ok=True)
    (run.state / "research" / "last.json").write_text(
        json.dumps({"at": time.time(), **result.to_json()}, indent=1, default=str),
        encoding="utf-8")
    return result


def _sources(run: _Run, extra: Sequence[str]) -> list[tuple[Source, Path]]:
    cfg = run.cfg
    specs: list[tuple[str, str | None]] = [(s, None) for s in cfg.sources]
    specs += [(s, "fork") for s in cfg.repos]
    specs += [(s, "backend") for s in cfg.backends]
    specs += [(s, None) for s in extra]
    out: list[tuple[Source, Path]] = []
    for spec, kind in specs:
        src = parse_source(spec, run.target.root, kind)
        try:
            if src.is_url:
                run.say(f"cloning {src.location}")
            out.append((src, materialize(src, run.state, offline=run.offline)))
        except SourceError as exc:
            run.notes.append(str(exc))
    return out


def _profile(run: _Run, wanted: bool) -> tuple[ProfileResult | None, float | None]:
    if not (wanted and run.cfg.profile):
        run.notes.append("profiling was turned off: hot spots unknown")
        return None, None
    target = run.target
    run.say("profiling the benchmark")
    prof = profile_command(
        target.bench.cmd, target.root, env=scrubbed_env(target.env),
        timeout_s=target.bench.timeout_s * 1.5 + 30, prefer=run.cfg.profiler,
        torch=run.cfg.torch_profile and uses_torch(target.root, focus_files(target, run.cfg)))
    return prof, _metric_from(target, prof)


def _guard_placements(target: Target, cfg: ResearchConfig, work: Workload, the_roof: Roof,
                      prof: ProfileResult | None) -> list[tuple[str, Placement]]:
    """Each guard of ``[research] batches`` placed on the roof with its batched work and
    the value the profiled benchmark printed for it."""
    specs = {g.name: g for g in target.guards}
    return [(name, place(batched(work, batch), the_roof,
                         _metric_from(target, prof, specs[name]) if prof else None,
                         rate=specs[name].direction is Direction.MAXIMIZE,
                         measured_under=prof.profiler if prof is not None else ""))
            for name, batch in cfg.batches]


def _metric_from(target: Target, prof: ProfileResult,
                 spec: MetricSpec | None = None) -> float | None:
    if not prof.stdout or prof.exit_code not in (0, None):
        return None
    try:
        return read_metric(spec or target.metric, prof.stdout, target.root)
    except (MetricError, OSError, ValueError):
        return None


def _gaps(run: _Run, sources: Sequence[tuple[Source, Path]]
          ) -> tuple[list[tuple[str, GapReport]], list[Side]]:
    reports: list[tuple[str, GapReport]] = []
    sides: list[Side] = []
    code = [(s, p) for s, p in sources if s.kind in ("fork", "backend") and p.is_dir()]
    if code:
        run.say("comparing implementations")
    for src, path in code:
        top = path / src.subdir if src.subdir else path
        other = collect(top, src.name, op_prefixes=run.cfg.op_prefixes,
                        cite_base=_cite_base(run.target, path, top),
                        cite_prefix=_cite_prefix(run.target, src, path, top))
        if not other.files:
            run.notes.append(f"{src.name}: no code files to compare")
            continue
        # collected afresh: comparing classifies definitions with both vocabularies
        reports.append((src.kind, find_gaps(other, focus_side(run.target, run.cfg))))
        if src.kind == "fork":  # another version of the same code: its hot functions
            sides.append(other)
    return reports, sides


def _cite_base(target: Target, path: Path, top: Path) -> Path:
    """Citations are repository-relative: inside the target, relative to its root."""
    try:
        top.resolve().relative_to(target.root.resolve())
        return target.root
    except ValueError:
        return path


def _cite_prefix(target: Target, src: Source, path: Path, top: Path) -> str:
    try:
        top.resolve().relative_to(target.root.resolve())
        return ""
    except ValueError:
        return src.location.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or src.name


def _remote(run: _Run, prof: ProfileResult | None, gaps: Sequence[tuple[str, GapReport]],
            arxiv_url: str | None, github_url: str | None, min_interval_s: float | None
            ) -> tuple[list[Paper], list[RepoHit]]:
    cfg = run.cfg
    queries = _queries(run.target, cfg, prof, gaps)
    papers: list[Paper] = []
    repos: list[RepoHit] = []
    if run.offline:
        run.notes.append("offline: arXiv and GitHub were not searched")
        return papers, repos
    cache = run.state / "research" / "cache"
    kw: dict[str, Any] = {} if min_interval_s is None else {"min_interval_s": min_interval_s}
    if cfg.arxiv and cfg.max_papers:
        client = ArxivClient(cache, base_url=arxiv_url or cfg.arxiv_url or
                             "https://export.arxiv.org/api/query", **kw)
        for q in queries[:3]:
            run.say(f"searching arXiv: {q}")
            try:
                papers.extend(client.search(q, cfg.max_papers))
            except RemoteUnavailable as exc:
                run.notes.append(str(exc))
                break
    if cfg.github:
        gh = GithubClient(cache, base_url=github_url or cfg.github_url or
                          "https://api.github.com", **kw)
        for q in queries[:1]:
            run.say(f"searching GitHub: {q}")
            try:
                repos.extend(gh.search_repos(q, 5))
            except RemoteUnavailable as exc:
                run.notes.append(str(exc))
    return list({p.id: p for p in papers}.values()), repos


def _index(run: _Run, sources: Sequence[tuple[Source, Path]], papers: Sequence[Paper],
           report: SourceReport, prof: ProfileResult | None,
           gaps: Sequence[tuple[str, GapReport]]) -> tuple[list[Hit], int]:
    run.say("indexing sources")
    docs: list[Document] = []
    for src, path in sources:
        docs.extend(read_source_documents(src, path, report))
    for p in papers:
        docs.append(Document(Source(p.url, "paper", label=p.url), p.url,
                             (p.title, "", *_wrap(p.summary)), "paper", title=p.title))
    index = PassageIndex.build(docs)
    hits: list[Hit] = []
    for q in _queries(run.target, run.cfg, prof, gaps):
        hits.extend(index.search(q, k=3))
    hits.sort(key=lambda h: -h.score)
    run.notes.extend(report.skipped[:20])
    return hits, len(index)


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


def _queries(target: Target, cfg: ResearchConfig, prof: ProfileResult | None,
             gaps: Sequence[tuple[str, GapReport]]) -> list[str]:
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

