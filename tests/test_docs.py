"""The README opens with the two commands, and documents every CLI verb."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from assay.cli.app import app

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


def test_cli_errors_keep_their_bracketed_key(tmp_path: Path) -> None:
    (tmp_path / "assay.toml").write_text(
        '[metric]\nname = "x"\ndirection = "up"\n[commands]\nbench = "true"\n'
        '[scope]\neditable = ["a"]\n')
    result = CliRunner().invoke(app, ["run", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "[metric.direction]" in result.output
    assert "assay.toml:3:" in result.output
