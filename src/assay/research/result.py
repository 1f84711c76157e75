"""What one research run found, as returned to callers and written to ``last.json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .brief import ResearchHypothesis
from .diffs import FunctionDiff
from .gaps import GapReport
from .index import Hit
from .profile import ProfileResult
from .remote import Paper, RepoHit
from .roofline import Placement, Roof, Workload


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
    diffs: list[FunctionDiff] = field(default_factory=list)
    hot_path: list[dict[str, Any]] = field(default_factory=list)  # op, share, bound
    guard_placements: list[tuple[str, Placement]] = field(default_factory=list)

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
            "guard_placements": [{"metric": name, **asdict(pl)}
                                 for name, pl in self.guard_placements],
            "gaps": [{"kind": kind, "have": rep.a.label, "lack": rep.b.label,
                      "only_have": [_gap_json(g) for g in rep.only_a],
                      "only_lack": [_gap_json(g) for g in rep.only_b]}
                     for kind, rep in self.gaps],
            "passages": self.passages,
            "hits": [{"citation": h.passage.citation, "kind": h.passage.kind,
                      "query": h.query, "score": h.score} for h in self.hits],
            "papers": [asdict(p) for p in self.papers],
            "repos": [asdict(r) for r in self.repos],
            "diffs": [asdict(d) for d in self.diffs],
            "hot_path": self.hot_path,
            "notes": self.notes,
            "sources_read": self.sources_read,
        }


def _gap_json(g: Any) -> dict[str, Any]:
    return {"kind": g.kind, "key": g.key, "note": g.note,
            "evidence": [e.cite for e in g.evidence],
            "parts_present": [e.cite for e in g.parts_present]}
