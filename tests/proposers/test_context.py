"""The proposal context: its sections, its size and its truncation order."""

from __future__ import annotations

import math
from pathlib import Path

from proposer_helpers import APP, BENCH, config_text, context_of, make_repo, target_of

from assay.config.spec import Target
from assay.model import Hypothesis
from assay.proposers.base import ExperimentSummary
from assay.proposers.context import build_context, estimate_tokens, incumbent_files


def repo(tmp_path: Path, brief: str = "Make work() faster.\n",
         extra: dict[str, str] | None = None) -> tuple[Target, str]:
    root = tmp_path / "repo"
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH, "program.md": brief,
                              **(extra or {})}, config_text())
    return target_of(root), commit


def history(k: int) -> list[ExperimentSummary]:
    out = []
    for i in range(k):
        state = "kept" if i % 5 == 0 else ("discarded" if i % 5 in (1, 2) else "invalid")
        out.append(ExperimentSummary(
            id=f"e{i:03d}", state=state, hypothesis=f"idea number {i}: unroll loop {i} times",
            proposer="llm", params={}, effect=0.01 * (i % 7) - 0.02,
            lo=0.01 * (i % 7) - 0.04, hi=0.01 * (i % 7), reason=(
                "checks failed: test_work" if state == "invalid"
                else "interval excludes δ" if state == "kept" else "effect below δ"),
            diffstat="src/app.py | 4 ++--"))
    return out


def test_all_sections_with_noise_and_delta(tmp_path: Path) -> None:
    target, commit = repo(tmp_path)
    ctx = context_of(target, commit, history=history(3), noise_floor=0.012, delta=0.02,
                     research_brief="Paper X: closed forms beat loops.",
                     hypotheses=[Hypothesis(1, "use numpy", ("https://example.org/p",),
                                            "paper", "open", 0.8),
                                 Hypothesis(2, "refuted idea", (), "paper", "refuted")])
    built = build_context(ctx, 24_000)
    text = built.text
    for heading in ("# Task", "## Brief", "## Measurement", "## Journal",
                    "## Research brief", "## Open hypotheses",
                    "## Editable files at the incumbent"):
        assert heading in text
    assert text.index("## Brief") < text.index("## Measurement") < text.index("## Journal")
    assert "`score`: higher is better" in text
    assert "about 1.20% (sd of the log-ratio)" in text and "δ = 2.00%" in text
    assert "less than 2.00%" in text
    assert "3 experiments so far: 2 discarded, 1 kept." in text
    assert "- e000 [kept] idea number 0" in text
    assert "effect -2.00% [-4.00%, +0.00%]" in text and "why: interval excludes δ" in text
    assert "H1 (open, score 0.80) use numpy [sources: https://example.org/p]" in text
    assert "refuted idea" not in text
    assert "src/app.py\n```\nimport time" in text and "bench.py\n```" not in text
    assert built.tokens == math.ceil(len(text) / 4) == estimate_tokens(text)
    assert built.truncated == ()


def test_kept_come_first_then_newest(tmp_path: Path) -> None:
    target, commit = repo(tmp_path)
    text = build_context(context_of(target, commit, history=history(7))).text
    order = [ln.split()[1] for ln in text.splitlines() if ln.startswith("- e0")]
    assert order == ["e005", "e000", "e006", "e004", "e003", "e002", "e001"]


def test_truncation_order_journal_first_then_files_then_brief(tmp_path: Path) -> None:
    big = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(400))
    target, commit = repo(tmp_path, brief="B" * 50 + "\n" + "brief line\n" * 300,
                          extra={"src/big.py": big})
    ctx = context_of(target, commit, history=history(200), noise_floor=0.01)
    full = build_context(ctx, 1_000_000)
    assert full.truncated == ()

    # a budget that only needs the journal cut
    budget = full.tokens - 500
    built = build_context(ctx, budget)
    assert built.tokens <= budget
    assert [t.split(":")[0] for t in built.truncated] == ["journal"]
    assert "older experiments not shown" in built.text and "def f399" in built.text
    assert "- e000 [kept]" in built.text  # kept experiments survive longest

    # tighter: the big file is cut, the small one stays whole, the brief stays
    budget = 3_000
    built = build_context(ctx, budget)
    assert built.tokens <= budget
    kinds = [t.split(":")[0].split()[0] for t in built.truncated]
    assert kinds[0] == "journal" and "file" in kinds and "task" not in kinds
    assert "src/big.py is cut here" in built.text and "def work(n):" in built.text
    assert "brief line\n" * 300 in built.text

    # tighter still: the brief goes last, the fixed parts never
    budget = 1_000
    built = build_context(ctx, budget)
    assert "task brief" in built.truncated
    assert "## Measurement" in built.text and "# Task" in built.text
    assert built.tokens <= budget + 150  # only the fixed parts may exceed


def test_agent_brief_leaves_files_out(tmp_path: Path) -> None:
    target, commit = repo(tmp_path)
    text = build_context(context_of(target, commit), include_files=False,
                         note="## What to do\nthings").text
    assert "## Editable files" not in text and text.rstrip().endswith("things")


def test_files_default_to_the_incumbent_commit(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, extra={"src/blob.py": "\0binary"})
    (target.root / "src" / "app.py").write_text("changed on disk, not committed\n")
    files = incumbent_files(target, commit)
    assert files == {"src/app.py": APP}
    text = build_context(context_of(target, commit, files={})).text
    assert "def work(n):" in text and "changed on disk" not in text


def test_no_brief_no_history(tmp_path: Path) -> None:
    target, commit = repo(tmp_path)
    target = Target(**{**target.__dict__, "brief": ""})
    text = build_context(context_of(target, commit)).text
    assert "## Brief" not in text and "No experiments yet." in text
    assert "Noise floor: not measured yet." in text


def test_example_context_is_printable(tmp_path: Path) -> None:
    """Keeps one rendered context at hand (printed with -s) for the docs."""
    target, commit = repo(tmp_path)
    ctx = context_of(target, commit, history=history(3), noise_floor=0.012, delta=0.02)
    built = build_context(ctx)
    print(built.text)
    print("tokens:", built.tokens)
    assert built.tokens < 2000


def test_no_file_of_the_holdout_reaches_a_context_even_when_editable(tmp_path: Path) -> None:
    from assay.repo.workspace import Workspace

    root = tmp_path / "repo"
    cfg = config_text().replace('editable = ["src/**/*.py"]', 'editable = ["src/**"]').replace(
        'protected = ["bench.py"]', 'protected = ["bench.py"]\nholdout = ["src/heldout/**"]'
    ).replace('bench = "python bench.py"',
              'bench = "python bench.py"\nholdout = "python src/eval_holdout.py --split test"')
    cfg += '\n[holdout_metric]\nname = "quality"\n'
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH, "program.md": "x\n",
                              "src/eval_holdout.py": "print('SECRET-SCRIPT')\n",
                              "src/heldout/answers.txt": "SECRET-ANSWERS\n",
                              "src/données.py": "x = 1\n"}, cfg)
    target = target_of(root)
    for files in (incumbent_files(target, commit), Workspace(target, "t").editable_files(commit)):
        assert "SECRET" not in repr(files), sorted(files)
        # git names a non-ASCII file verbatim (never "\303\251" quoting): it is listed too
        assert sorted(files) == ["src/app.py", "src/données.py"]
