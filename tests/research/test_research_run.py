"""run_research end to end on a small target, and the `research` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from research_helpers import ATOM, closed_port, write
from typer.testing import CliRunner

from assay.cli.research import research_command
from assay.config.spec import load
from assay.errors import ConfigError
from assay.journal.store import Journal
from assay.research import ResearchConfig, read_brief, run_research


def test_run_research_end_to_end(target_repo: Path) -> None:
    target = load(target_repo)
    journal = Journal.open(target.state_dir / "journal.sqlite")
    port = closed_port()
    seen: list[str] = []
    result = run_research(target, journal, progress=seen.append,
                          arxiv_url=f"http://127.0.0.1:{port}/api/query",
                          github_url=f"http://127.0.0.1:{port}")
    # the profile names the hot code of the target
    assert result.profile is not None and result.profile.hotspots
    hot = {h.function for h in result.profile.hotspots[:3]}
    assert hot & {"rms_norm", "mul", "forward"}
    assert result.profile.hotspots[0].file == "src/model.py"
    # the fork's fusion is the top hypothesis, with the fork's file:line
    top = result.hypotheses[0]
    assert top.source_kind == "fork"
    assert "RMS_NORM → MUL" in top.text
    assert top.sources[0].endswith("kernels.py:12")
    assert "src/model.py:4" in top.sources
    assert "memory-bound" in top.text
    # the metric printed under the profiler placed it on the roof
    assert result.placement is not None and result.placement.bound == "memory-bound"
    assert result.placement.fraction is not None and result.placement.fraction > 0
    # offline services are notes, not crashes
    assert any("arXiv is unreachable" in n for n in result.notes)
    assert any("GitHub is unreachable" in n for n in result.notes)
    # stored in the journal with sources and kinds
    stored = journal.hypotheses()
    assert [h.id for h in result.hypotheses] == [h.id for h in stored]
    assert stored[0].source_kind == "fork" and stored[0].status == "open"
    kinds = {h.source_kind for h in stored}
    assert {"fork", "profile", "doc"} <= kinds
    assert any(e.kind == "research" for e in journal.events())
    # the brief
    brief = (target_repo / ".assay" / "research.md").read_text()
    assert brief == result.brief == read_brief(target)
    assert "## Hypotheses, ranked" in brief
    assert "kernels.py:12" in brief
    assert "docs/notes.md:" in brief
    assert "Profiler: **py-spy**" in brief or "Profiler: **cProfile**" in brief
    assert "profiling the benchmark" in seen
    # running again stores no idea twice: a hypothesis with the same kind and sources
    # keeps its id even where its numbers (shares, scores) moved
    before = {(h.source_kind, h.sources): h.id for h in stored}
    again = run_research(target, journal, offline=True)
    for h in again.hypotheses:
        if (h.source_kind, h.sources) in before:
            assert h.id == before[(h.source_kind, h.sources)]
    keys = [(h.source_kind, h.sources) for h in journal.hypotheses()]
    assert len(keys) == len(set(keys))
    # the same evidence twice: the second run adds nothing
    run_research(target, journal, offline=True, profile=False)
    count = len(journal.hypotheses())
    run_research(target, journal, offline=True, profile=False)
    assert len(journal.hypotheses()) == count
    journal.close()


def test_offline_and_no_profile(target_repo: Path) -> None:
    target = load(target_repo)
    assert read_brief(target) == ""
    result = run_research(target, None, offline=True, profile=False)
    assert result.profile is None
    assert "offline: arXiv and GitHub were not searched" in result.notes
    assert result.hypotheses[0].source_kind == "fork"
    assert "Not profiled" in result.brief


def test_config_keys_are_validated(target_repo: Path) -> None:
    toml = target_repo / "assay.toml"
    toml.write_text(toml.read_text() + "sourcez = []\n")
    with pytest.raises(ConfigError, match=r"research.sourcez.*not a known key"):
        ResearchConfig.from_target(load(target_repo))
    toml.write_text(toml.read_text().replace("sourcez = []\n", "flops = -1.0\n")
                    .replace("flops = 24000.0\n", ""))
    with pytest.raises(ConfigError, match="flops"):
        ResearchConfig.from_target(load(target_repo))


def test_missing_source_is_a_clear_error(target_repo: Path) -> None:
    toml = target_repo / "assay.toml"
    toml.write_text(toml.read_text().replace('sources = ["docs/"]', 'sources = ["dox/"]'))
    with pytest.raises(Exception, match=r"dox.*does not exist"):
        run_research(load(target_repo), None, offline=True, profile=False)


def test_command(target_repo: Path, tmp_path: Path) -> None:
    extra = write(tmp_path / "extra" / "idea.md", "# Idea\n\nCache the reciprocal norm.\n")
    app = typer.Typer()
    app.command()(research_command)

    @app.callback()
    def main() -> None:
        pass

    runner = CliRunner()
    res = runner.invoke(app, ["research-command", "--root", str(target_repo), "--offline",
                              "--no-profile", "--json", "--source", str(extra.parent)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["hypotheses"][0]["source_kind"] == "fork"
    assert any(s.startswith("extra (doc") for s in data["sources_read"])
    assert data["gaps"][0]["only_have"][0]["key"] == "rms_norm+mul"
    bad = runner.invoke(app, ["research-command", "--root", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2
    assert "assay.toml" in bad.output


def test_papers_and_repositories_from_the_services(target_repo: Path,
                                                   http_server: Any) -> None:
    arxiv = http_server([(200, {}, ATOM)])
    github = http_server([(200, {}, json.dumps({"items": [
        {"full_name": "fast/llm.c", "html_url": "https://github.com/fast/llm.c",
         "description": "fused kernels", "stargazers_count": 7}]}))])
    target = load(target_repo)
    result = run_research(target, None, profile=False, min_interval_s=0,
                          arxiv_url=f"{arxiv.url}/api/query", github_url=github.url)
    assert [p.id for p in result.papers] == ["2401.00001v1"]
    assert arxiv.paths and all("search_query=" in p for p in arxiv.paths)
    papers = [h for h in result.hypotheses if h.source_kind == "paper"]
    assert papers and papers[0].sources == ("http://arxiv.org/abs/2401.00001v1",)
    assert "Fused RMS Normalization" in papers[0].text
    assert "[fast/llm.c](https://github.com/fast/llm.c)" in result.brief
    assert not [n for n in result.notes if "unreachable" in n]


def test_a_guard_with_a_batch_is_placed_on_the_roof_apart(target_repo: Path) -> None:
    """tg is batch-1 decoding (memory-bound); pp, a 512-token prompt in one batch, reads the
    weights once per 512 tokens: the same work per token is compute-bound."""
    toml = target_repo / "assay.toml"
    toml.write_text(toml.read_text().replace("[research]", '''\
[[guards]]
name = "pp"
direction = "maximize"
tolerance = 0.02

[research]
batches = {pp = 512}'''))
    result = run_research(load(target_repo), None, offline=True, profile=False)
    assert result.placement is not None and result.placement.bound == "memory-bound"
    [(name, pp)] = result.guard_placements
    assert name == "pp" and pp.bound == "compute-bound"
    assert pp.intensity == pytest.approx(24000.0 / (128000.0 / 512))
    assert "Placement of the guard pp: **compute-bound**" in result.brief
    assert result.to_json()["guard_placements"][0]["bound"] == "compute-bound"
    toml.write_text(toml.read_text().replace("batches = {pp = 512}", "batches = {tg = 512}"))
    with pytest.raises(ConfigError, match=r"research.batches.*'tg'.*not a \[\[guards\]\]"):
        ResearchConfig.from_target(load(target_repo))
    toml.write_text(toml.read_text().replace("batches = {tg = 512}", "batches = {pp = 0}"))
    with pytest.raises(ConfigError, match="not a batch size"):
        ResearchConfig.from_target(load(target_repo))
