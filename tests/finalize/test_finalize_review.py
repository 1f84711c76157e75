"""Reviewers on real runs: a planted hazard is found and blocks its group; rollback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay import finalize as fin
from assay.cli.app import app
from assay.errors import ReviewError
from assay.finalize import review
from assay.journal.store import Journal
from assay.model import EventRow
from assay.repo import plumbing as branches
from tests.proposers.proposer_helpers import LLMServer, Reply

from .finalize_kit import edit, git, make_repo, refs, run_queue

CONSUMERS = Path(__file__).resolve().parents[2] / "examples" / "review" / "consumers.py"

KERNEL = """\
FUSED = False
SCRATCH = [0.0] * 4  # the products a*b: an intermediate


def step(a, b, c, out):
    for i in range(len(a)):
        SCRATCH[i] = a[i] * b[i]
    for i in range(len(a)):
        out[i] = SCRATCH[i] + c[i]


def report():
    return sum(SCRATCH)  # a second consumer of the intermediate
"""
FUSED_STEP = """\
def step(a, b, c, out):
    for i in range(len(a)):
        out[i] = a[i] * b[i] + c[i]
"""
UNFUSED_STEP = KERNEL[KERNEL.index("def step"):KERNEL.index("\n\ndef report")] + "\n"
CHECKS = """\
import kernel

out = [0.0] * 4
kernel.step([1, 2, 3, 4], [2, 2, 2, 2], [1, 1, 1, 1], out)
assert out == [3, 5, 7, 9], out
print("ok")
"""
FUSED = KERNEL.replace(UNFUSED_STEP, FUSED_STEP).replace("FUSED = False", "FUSED = True")
REPORT_LINE = FUSED.splitlines().index("    return sum(SCRATCH)  # a second consumer of the "
                                       "intermediate") + 1  # in the fused file
CONTRIBUTING = "Kernels: never drop a store to a buffer another function reads.\n"


def hazard_run(tmp_path: Path, extra: str) -> Path:
    root = make_repo(tmp_path / "repo", {"kernel.py": KERNEL, "checks.py": CHECKS,
                                         "CONTRIBUTING.md": CONTRIBUTING}, extra=extra)
    bench = (root / "bench.py").read_text().replace("import b\n", "import b\nimport kernel\n")
    bench = bench.replace("if a.FAST_A:", "if kernel.FUSED:\n    speed *= 1.4\nif a.FAST_A:")
    (root / "bench.py").write_text(bench)
    git(root, "commit", "-qam", "bench reads the kernel")
    run_queue(root, [
        ("kernel: fuse the multiply into the add", edit(root, "kernel.py", KERNEL, FUSED)),
        ("b.py: the fast kernel", edit(root, "b.py", "FAST_B = False", "FAST_B = True")),
    ])
    return root


def _events(root: Path, kind: str) -> list[EventRow]:
    j = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        return [e for e in j.events(limit=100_000) if e.kind == kind]
    finally:
        j.close()


def test_a_command_reviewer_finds_the_skipped_intermediate_and_blocks_it(
        tmp_path: Path) -> None:
    extra = (f'\n[finalize.review]\nreviewer = "command"\n'
             f'command = "{sys.executable} {CONSUMERS}"\n')
    root = hazard_run(tmp_path, extra)
    res = fin.finalize(root, measure_groups=False)

    fused, other = res.outcomes
    assert fused.group.labels == ("e0001",) and other.group.labels == ("e0002",)
    (found,) = fused.review.findings
    report_line = REPORT_LINE
    assert (found.file, found.line, found.severity) == ("kernel.py", report_line, "blocking")
    assert "report() reads SCRATCH" in found.message
    assert fused.review.blocked and not fused.finalized
    assert other.review.findings == [] and other.finalized
    # blocked: no branch; the other group has its branch
    assert branches.rev(root, f"refs/heads/{fused.branch}") is None
    assert branches.rev(root, f"refs/heads/{other.branch}") is not None
    assert found.id in (res.folder / fused.group.slug / "PR.md").read_text()
    # with a narrow window, the far consumer is listed among the other uses, with its line
    around = review.surrounding(root, res.base, fused.commit, ["kernel.py"], context=1)
    assert f"kernel.py:{REPORT_LINE}: return sum(SCRATCH)" in around
    assert f"blocked by review ({found.id})" in (res.folder / "CHANGES.md").read_text()
    # every finding is in the journal, with its place
    (ev,) = _events(root, "review")
    data = ev.data["finding"]
    assert data["id"] == found.id and data["line"] == report_line and data["file"] == "kernel.py"
    print("\nplanted-hazard findings:")
    for f in fused.review.findings:
        print(f"  {f.id} {f.severity} {f.where}: {f.message}")

    # waived: the group is finalized, the PR text says so, the waiver is recorded
    res2 = fin.finalize(root, measure_groups=False, waive=[found.id])
    fused2 = res2.outcomes[0]
    assert fused2.finalized and fused2.review.findings[0].id == found.id
    message = git(root, "log", "-1", "--format=%B", fused2.branch)
    assert f"{found.id} blocking (waived) kernel.py:{report_line}" in message
    assert [e.message for e in _events(root, "waive")] == [
        f"finding {found.id} waived (assay finalize --waive)"]


def test_the_llm_reviewer_reads_diff_uses_notes_and_checklist(tmp_path: Path) -> None:
    answer = {"findings": [{"file": "kernel.py", "line": REPORT_LINE, "severity": "blocking",
                            "message": "report() still reads SCRATCH, which step() no "
                                       "longer writes"}]}
    with LLMServer(default=json.dumps(answer)) as server:
        extra = (f'\n[finalize.review]\nreviewer = "llm"\n\n[proposer.llm]\n'
                 f'provider = "openai"\nmodel = "reviewer"\nbase_url = "{server.url}/v1"\n'
                 'api_key_env = ""\n')
        root = hazard_run(tmp_path, extra)
        res = fin.finalize(root, measure_groups=False)
        prompts = [r.last_user for r in server.requests]
    assert len(prompts) == 2  # one review per group
    first = prompts[0]
    assert "+        out[i] = a[i] * b[i] + c[i]" in first  # the diff
    assert "-        SCRATCH[i] = a[i] * b[i]" in first
    assert review.CHECKLIST[0] in first and "NaN and Inf" in first  # the checklist
    assert CONTRIBUTING.strip() in first  # the project's notes
    # the code around the change, numbered: the other consumer of SCRATCH is in it
    assert f"{REPORT_LINE:5d}      return sum(SCRATCH)" in first
    fused = res.outcomes[0]
    assert [(f.file, f.line, f.blocking) for f in fused.review.findings] == [
        ("kernel.py", REPORT_LINE, True)]
    assert not fused.finalized
    # both review calls are in the journal's account (model "reviewer": no price)
    journal = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        spent = journal.spent("finalize")
    finally:
        journal.close()
    assert (spent.calls, spent.tokens, spent.unpriced) == (2, 2400, 2)


def test_a_review_that_could_pass_a_cap_is_skipped_and_said_so(tmp_path: Path) -> None:
    # a priced reviewer model and a dollar cap below one review's worst case: no review is
    # sent, finalize says which cap and what was spent, and the groups go on unreviewed
    answer = {"findings": [{"file": "kernel.py", "line": REPORT_LINE, "severity": "blocking",
                            "message": "report() still reads SCRATCH"}]}
    with LLMServer(default=json.dumps(answer)) as server:
        extra = (f'\n[finalize.review]\nreviewer = "llm"\n\n[proposer.llm]\n'
                 f'provider = "openai"\nmodel = "gpt-4.1"\nbase_url = "{server.url}/v1"\n'
                 'api_key_env = ""\n')
        root = hazard_run(tmp_path, extra)
        cfg = root / "assay.toml"
        cfg.write_text(cfg.read_text().replace("[run]\n", "[run]\nmax_usd = 0.01\n", 1))
        said: list[str] = []
        res = fin.finalize(root, measure_groups=False, report=said.append)
        sent = list(server.requests)
    assert sent == []  # the cap is checked before each call
    skips = [m for m in said if " skipped: " in m]
    assert len(skips) == 2, said
    assert skips[0].startswith("review of ")
    assert "the cap [run] max_usd = $0.01 is reached" in skips[0]
    assert "$0.0000 on 0 model calls (0 tokens) are spent" in skips[0]
    fused = res.outcomes[0]
    assert fused.review.skipped and fused.review.findings == [] and fused.finalized
    text = (res.folder / fused.group.slug / "PR.md").read_text()
    assert "- review by `llm`: skipped, not made: the cap [run] max_usd = $0.01" in text
    messages = [e.message for e in _events(root, "review")]
    assert len(messages) == 2 and messages[0].startswith(
        f"review of {fused.group.slug} skipped: the cap [run] max_usd")


def test_the_second_review_is_skipped_once_the_first_spent_the_cap(tmp_path: Path) -> None:
    # the first review's reply reports 490,000 prompt tokens ($0.98 at gpt-4.1's $2/Mtok):
    # the second's worst case (at least 4,096 reply tokens at $8/Mtok) would pass $1
    clean = json.dumps({"findings": []})
    with LLMServer([Reply(clean, tokens_in=490_000, tokens_out=200)],
                   default=clean) as server:
        extra = (f'\n[finalize.review]\nreviewer = "llm"\n\n[proposer.llm]\n'
                 f'provider = "openai"\nmodel = "gpt-4.1"\nbase_url = "{server.url}/v1"\n'
                 'api_key_env = ""\n')
        root = hazard_run(tmp_path, extra)
        cfg = root / "assay.toml"
        cfg.write_text(cfg.read_text().replace("[run]\n", "[run]\nmax_usd = 1.0\n", 1))
        said: list[str] = []
        res = fin.finalize(root, measure_groups=False, report=said.append)
        sent = len(server.requests)
    assert sent == 1
    first, second = (o.review for o in res.outcomes)
    assert not first.skipped and first.findings == []
    assert second.skipped.startswith("the cap [run] max_usd = $1 is reached")
    assert "$0.9816 on 1 model call (490,200 tokens) are spent" in second.skipped
    assert any(m.endswith(second.skipped) and " skipped: " in m for m in said), said
    assert all(o.finalized for o in res.outcomes)


def test_a_failure_rolls_back_every_branch_and_leaves_the_tree(tmp_path: Path) -> None:
    with LLMServer(default="I looked and it seems fine to me.") as server:
        extra = (f'\n[finalize.review]\nreviewer = "llm"\n\n[proposer.llm]\n'
                 f'provider = "openai"\nmodel = "reviewer"\nbase_url = "{server.url}/v1"\n'
                 'api_key_env = ""\n')
        root = hazard_run(tmp_path, extra)
        # an earlier finalize left a branch of the same name; the user has their own work
        earlier = git(root, "rev-parse", "HEAD").strip()
        git(root, "branch", "assay/opt-pr/b-py-the-fast-kernel", earlier)
        git(root, "checkout", "-qb", "feature")
        (root / "b.py").write_text("FAST_B = 'staged by the user'\n")
        git(root, "add", "b.py")
        (root / "a.py").write_text("FAST_A = 'edited, not staged'\n")
        before_refs, before_status = refs(root), git(root, "status", "--porcelain")
        before_index = git(root, "ls-files", "-s")
        with pytest.raises(ReviewError, match="no JSON object"):
            fin.finalize(root, measure_groups=False)
    assert refs(root) == before_refs
    assert git(root, "status", "--porcelain") == before_status
    assert git(root, "ls-files", "-s") == before_index
    assert git(root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "feature"
    assert (root / "a.py").read_text() == "FAST_A = 'edited, not staged'\n"
    assert git(root, "rev-parse", "assay/opt-pr/b-py-the-fast-kernel").strip() == earlier
    assert not (root / ".assay" / "finalize" / "opt" / "CHANGES.md").exists()


def test_findings_are_read_from_sanitizer_linter_and_json_output() -> None:
    out = (
        "/w/tree/src/k.c:12:7: runtime error: signed integer overflow: 2147483647 + 1\n"
        "src/k.c:30: warning: unused variable 'tmp'\n"
        "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602\n"
        "SUMMARY: AddressSanitizer: heap-buffer-overflow /w/tree/src/k.c:41:9 in fuse\n"
        "just a log line\n")
    found = review.parse_lines(out, "command", "g", "/w/tree")
    assert [(f.file, f.line, f.severity) for f in found] == [
        ("src/k.c", 12, "blocking"), ("src/k.c", 30, "warning"), ("src/k.c", 41, "blocking")]
    assert found[2].message == "AddressSanitizer: heap-buffer-overflow"
    assert len({f.id for f in found}) == 3
    again = review.parse_lines(out, "command", "g", "/w/tree")
    assert [f.id for f in again] == [f.id for f in found]  # stable ids, for --waive
    js = review.parse_json('Here: {"findings": [{"file": "a.c", "line": 3, "severity": "note",'
                           ' "message": "m"}]}', "llm", "g")
    assert js is not None and js[0].where == "a.c:3" and not js[0].blocking
    assert review.parse_json("no json", "llm", "g") is None
    with pytest.raises(ReviewError, match="severity"):
        review.parse_json('{"findings": [{"file": "a", "line": 1, "severity": "bad", '
                          '"message": "m"}]}', "llm", "g")
    with pytest.raises(ReviewError, match='no "findings" list'):
        review.parse_json('{"ok": true}', "llm", "g")


AGENT = """\
import json
import pathlib
import re

task = pathlib.Path(".assay-review.md").read_text()
assert "## Hazards to check, one by one" in task
files = re.findall(r"^\\+\\+\\+ b/(\\S+)", task, re.M)
print("looking around ...")
print(json.dumps({"findings": [{"file": files[0], "line": 1, "severity": "note",
                                "message": "reviewed by the scripted agent"}]}))
"""


def test_the_agent_reviewer_runs_in_the_group_tree_and_a_bad_name_is_a_config_error(
        tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    extra = (f'\n[finalize.review]\nreviewer = "agent"\n'
             f'command = "{sys.executable} {agent}"\n')
    root = hazard_run(tmp_path, extra)
    res = fin.finalize(root, measure_groups=False)
    assert [[(f.file, f.severity, f.reviewer) for f in o.review.findings]
            for o in res.outcomes] == [[("kernel.py", "note", "agent")],
                                       [("b.py", "note", "agent")]]
    assert all(o.finalized for o in res.outcomes)  # notes do not block
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace('reviewer = "agent"', 'reviewer = "lint"'))
    before = refs(root)
    out = CliRunner().invoke(app, ["finalize", "-C", str(root), "--no-measure"])
    assert out.exit_code == 2, out.output
    assert "finalize.review.reviewer" in out.output and "'lint' is not one of" in out.output
    assert "Traceback" not in out.output and refs(root) == before
