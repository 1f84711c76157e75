"""Every proposer in the package runs the proposer kit shipped in assay.testing.

Real backends: Optuna for the sweep, patch files for the queue, a local HTTP server
speaking the OpenAI wire format for the llm proposer, a scripted agent process.
"""

from __future__ import annotations

import sys
from pathlib import Path

from proposer_helpers import APP, BENCH, LLMServer, config_text, make_repo, target_of

from assay.config.spec import parse
from assay.faces.mcp import OutsideProposer
from assay.proposers.agent import AgentProposer
from assay.proposers.llm import LLMProposer
from assay.proposers.queue import QueueProposer
from assay.proposers.sweep import SweepProposer
from assay.testing import NoProposer
from assay.testing.proposers import ProposerCase, ProposerContract

PARAMS = """
[[params]]
name = "N"
type = "int"
low = 1
high = {high}
apply = "env"
"""


def _repo(tmp_path: Path, extra: str = "", llm: str = "", agent: str = "",
          files: dict[str, str] | None = None) -> tuple[Path, str]:
    root = tmp_path / "repo"
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH,
                              "program.md": "Make work() faster.\n", **(files or {})},
                       config_text(llm=llm, agent=agent, extra=extra))
    return root, commit


def _sweep(tmp_path: Path, sweep: str = "") -> ProposerCase:
    """The sweep proposer over N in 1..1000 (``sweep``: its [proposer.sweep] keys)."""
    root, commit = _repo(tmp_path, PARAMS.format(high=1000)
                         + (f"\n[proposer.sweep]\n{sweep}" if sweep else ""))
    target = target_of(root)
    return ProposerCase(SweepProposer.from_target(target), target, commit)


class TestSweepTPE(ProposerContract):
    def make_case(self, tmp_path: Path) -> ProposerCase:
        return _sweep(tmp_path)


class TestSweepRandom(ProposerContract):
    def make_case(self, tmp_path: Path) -> ProposerCase:
        return _sweep(tmp_path, 'sampler = "random"\n')


class TestSweepGP(ProposerContract):
    rounds = 3  # past n_startup: the Gaussian process itself proposes

    def make_case(self, tmp_path: Path) -> ProposerCase:
        return _sweep(tmp_path, 'sampler = "gp"\nn_startup = 1\n')


class TestSweepGrid(ProposerContract):
    rounds = 6

    def make_case(self, tmp_path: Path) -> ProposerCase:
        root, commit = _repo(tmp_path, PARAMS.format(high=3)
                             + '\n[proposer.sweep]\nsampler = "grid"\n')
        target = target_of(root)
        return ProposerCase(SweepProposer.from_target(target), target, commit,
                            exhausts_within=3)


def _patch(i: int) -> str:
    return (f"# hypothesis: step {i}\n"
            "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n"
            "@@ -1,1 +1,1 @@\n-import time\n+import time  # step " + str(i) + "\n")


class TestQueue(ProposerContract):
    rounds = 5

    def make_case(self, tmp_path: Path) -> ProposerCase:
        files = {f"patches/{i:02d}.patch": _patch(i) for i in range(3)}
        root, commit = _repo(tmp_path, files=files)
        target = target_of(root)
        return ProposerCase(QueueProposer.from_target(target), target, commit,
                            exhausts_within=3)


def _edit(i: int) -> str:
    return (f"HYPOTHESIS: idea {i}: a cheaper import line\n\nsrc/app.py\n```python\n"
            "<<<<<<< SEARCH\nimport time\n=======\n"
            f"import time  # idea {i}\n>>>>>>> REPLACE\n```\n")


class TestLLM(ProposerContract):
    def make_case(self, tmp_path: Path) -> ProposerCase:
        server = LLMServer([_edit(i) for i in range(12)]).__enter__()
        llm = (f'provider = "openai"\nmodel = "test-model"\nbase_url = "{server.url}/v1"\n'
               'api_key_env = "ASSAY_TEST_KEY"\nmax_backoff_s = 1\n')
        root, commit = _repo(tmp_path, llm=llm)
        target = target_of(root)
        proposer = LLMProposer.from_target(target, sleep=lambda s: None,
                                           environ={"ASSAY_TEST_KEY": "sk-test"})
        return ProposerCase(proposer, target, commit,
                            cleanup=[lambda: server.__exit__(None, None, None)])


AGENT = r'''
import pathlib
app = pathlib.Path("src/app.py")
app.write_text(app.read_text().replace("import time\n", "import time  # agent\n", 1))
pathlib.Path(".assay-hypothesis.txt").write_text("a comment on the import line\n")
'''


class TestAgent(ProposerContract):
    rounds = 3

    def make_case(self, tmp_path: Path) -> ProposerCase:
        tmp_path.mkdir(parents=True, exist_ok=True)
        script = tmp_path / "agent.py"
        script.write_text(AGENT)
        root, commit = _repo(tmp_path, agent=f"command = '''{sys.executable} {script}'''\n")
        target = target_of(root)
        return ProposerCase(AgentProposer.from_target(target), target, commit)


def _bare(tmp_path: Path) -> ProposerCase:
    root, commit = _repo(tmp_path)
    return ProposerCase(NoProposer(), parse((root / "assay.toml").read_text(), root), commit,
                        exhausts_within=0)


class TestNoProposer(ProposerContract):
    def make_case(self, tmp_path: Path) -> ProposerCase:
        return _bare(tmp_path)


class TestOutsideProposer(ProposerContract):
    def make_case(self, tmp_path: Path) -> ProposerCase:
        case = _bare(tmp_path)
        case.proposer = OutsideProposer()
        return case
