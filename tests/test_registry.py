"""Each backend name is written once: the registry tables feed config, --help and building."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.config import spec as config
from assay.errors import ConfigError
from assay.registry import EXECUTORS, PROPOSERS, READERS, SAMPLERS

BASE = """\
[metric]
name = "t"
reader = "{reader}"
json_path = "t"

[commands]
bench = "true"

[scope]
editable = ["x.py"]

[run]
proposer = "{proposer}"
executor = "{executor}"
"""


def test_config_accepts_exactly_the_registered_names(tmp_path: Path) -> None:
    for p in PROPOSERS.names:
        for e in EXECUTORS.names:
            for r in READERS.names:
                t = config.parse(BASE.format(proposer=p, executor=e, reader=r), tmp_path)
                assert (t.run.proposer, t.run.executor, t.metric.reader) == (p, e, r)
    with pytest.raises(ConfigError) as exc:
        config.parse(BASE.format(proposer="oracle", executor="local", reader="json"), tmp_path)
    assert all(name in str(exc.value) for name in PROPOSERS.names)
    assert config.SAMPLERS == SAMPLERS.names == ("tpe", "random", "grid", "gp")


def test_help_lists_every_proposer() -> None:
    out = CliRunner().invoke(app, ["run", "--help"], terminal_width=300).output
    for name in PROPOSERS.names:
        assert f"{name}:" in out


def test_unknown_names_say_what_is_valid() -> None:
    with pytest.raises(KeyError, match="unknown executor 'mainframe'; valid: local, ray"):
        EXECUTORS.get("mainframe")
    with pytest.raises(ConfigError) as exc:
        PROPOSERS.for_config("oracle", "assay.toml", "run.proposer")
    assert "run.proposer" in str(exc.value) and "sweep" in str(exc.value)


def test_readers_read_through_the_table(tmp_path: Path) -> None:
    from assay.bench.metrics import read_metric
    from assay.config.spec import MetricSpec

    assert read_metric(MetricSpec("t"), "METRIC t=1.5\n", tmp_path) == 1.5
    assert read_metric(MetricSpec("t", reader="summary_block"), "---\nt: 2.5\n", tmp_path) == 2.5
    assert read_metric(MetricSpec("t", reader="json", json_path="a.t"), '{"a": {"t": 3}}',
                       tmp_path) == 3.0


def test_every_entry_names_a_factory_that_resolves() -> None:
    from assay.registry import REVIEWERS

    for table in (PROPOSERS, EXECUTORS, SAMPLERS, READERS, REVIEWERS):
        for entry in table:
            assert callable(table.get(entry.name)), entry


def test_the_registry_imports_no_backend() -> None:
    import ast

    import assay.registry

    tree = ast.parse(Path(assay.registry.__file__).read_text())
    own = {node.module for node in ast.walk(tree)
           if isinstance(node, ast.ImportFrom) and node.level > 0}
    assert own == {"errors"}
