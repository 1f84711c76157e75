"""Every bundled example's assay.toml loads, with the subsystem tables it declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.config import spec as config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["quickstart", "gpt", "llamacpp"])
def test_example_config_loads(name: str) -> None:
    target = config.load(EXAMPLES / name)
    assert target.metric.name
    assert target.editable


def test_llamacpp_recipe_reads_llama_bench_json() -> None:
    from assay.bench.metrics import read_metric

    target = config.load(EXAMPLES / "llamacpp")
    out = ('[{"model_type": "llama 7B Q4_0", "n_prompt": 512, "n_gen": 0, '
           '"avg_ts": 3712.4, "stddev_ts": 20.1}, '
           '{"model_type": "llama 7B Q4_0", "n_prompt": 0, "n_gen": 128, '
           '"avg_ts": 52.1, "stddev_ts": 0.3}]')
    assert read_metric(target.metric, out, EXAMPLES) == pytest.approx(52.1)
    [pp] = target.guards
    assert (pp.name, pp.tolerance) == ("pp512", 0.02)
    assert read_metric(pp, out, EXAMPLES) == pytest.approx(3712.4)
    from assay.proposers.agent import AgentProposer
    from assay.research import ResearchConfig

    assert ResearchConfig.from_target(target).backends
    assert AgentProposer.from_target(target) is not None
