"""The README opens with the two commands, and documents every CLI verb."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from assay.cli import app

ROOT = Path(__file__).resolve().parent.parent


def test_readme_opens_with_the_two_commands() -> None:
    lines = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.strip()]
    block = lines[lines.index("```sh") + 1: lines.index("```sh") + 3]
    assert block[0].startswith("make demo") and block[1].startswith("make test")


def test_every_verb_is_documented_and_has_help() -> None:
    readme = (ROOT / "README.md").read_text()
    names = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    assert {"init", "run", "status", "log", "show", "export", "research", "report", "serve",
            "mcp", "stop"} <= set(names)
    runner = CliRunner()
    for name in names:
        assert f"assay {name}" in readme, f"`assay {name}` is not in the README"
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_ci_calls_the_readme_test_command() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()
