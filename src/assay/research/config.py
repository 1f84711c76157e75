"""``[research]`` in ``assay.toml``: what research reads and how it places the work.

Every key is optional::

    [research]
    sources = ["docs/", "notes/paper.pdf"]        # documents to index
    repos = ["https://github.com/x/fork.git"]     # competitors and forks (cloned shallow)
    backends = ["src/backend-cuda"]               # the project's other backends
    focus = ["src/backend-cpu"]                   # the code to improve (default: editable)
    queries = ["rms norm fusion"]                 # extra search terms
    offline = false                               # skip arXiv and GitHub
    profile = true
    profiler = "auto"                             # auto, py-spy, cProfile, perf
    torch_profile = true                          # also torch.profiler if torch is used
    arxiv = true
    github = true
    max_papers = 5
    model = "llama 7B q4_0"                       # or flops / bytes per unit of the metric
    batches = {pp512 = 512}                       # a guard's tokens per read of the weights
    flops = 1.4e10
    bytes = 3.9e9
    device = "AMD EPYC 7763"                      # default: detected
    precision = "fp32"
    peak_flops = 2.0e12                           # for a device the table lacks
    bandwidth = 2.0e11
    op_prefixes = ["MYLIB_OP_"]                   # op enums without an _OP_ segment
    top = 12                                      # hypotheses to keep
    measure = false                               # measure the peaks even where known
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.section import Section
from ..config.spec import Target


@dataclass(frozen=True)
class ResearchConfig:
    sources: tuple[str, ...] = ()
    repos: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    focus: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    offline: bool = False
    profile: bool = True
    profiler: str = "auto"
    torch_profile: bool = True
    arxiv: bool = True
    github: bool = True
    arxiv_url: str = ""
    github_url: str = ""
    max_papers: int = 5
    model: str = ""
    # guard metric -> tokens that share one read of the weights (a prompt's batch): its own
    # roofline placement, the model's work per token with the bytes divided by the batch
    batches: tuple[tuple[str, float], ...] = ()
    flops: float | None = None
    bytes: float | None = None
    device: str = ""
    precision: str = ""
    peak_flops: float | None = None
    bandwidth: float | None = None
    op_prefixes: tuple[str, ...] = ()
    top: int = 12
    measure: bool = False

    @classmethod
    def from_target(cls, target: Target) -> ResearchConfig:
        sec = target.section("research")
        cfg = cls(
            sources=sec.strings("sources", ()),
            repos=sec.strings("repos", ()),
            backends=sec.strings("backends", ()),
            focus=sec.strings("focus", ()),
            queries=sec.strings("queries", ()),
            offline=sec.get("offline", bool, False),
            profile=sec.get("profile", bool, True),
            profiler=sec.choice("profiler", ("auto", "py-spy", "cProfile", "perf"), "auto"),
            torch_profile=sec.get("torch_profile", bool, True),
            arxiv=sec.get("arxiv", bool, True),
            github=sec.get("github", bool, True),
            arxiv_url=sec.get("arxiv_url", str, ""),
            github_url=sec.get("github_url", str, ""),
            max_papers=sec.number("max_papers", 5, low=0, high=50, integer=True),
            model=sec.get("model", str, ""),
            batches=_batches(sec, target),
            flops=sec.number("flops", None, low=0.0),
            bytes=sec.number("bytes", None, low=0.0),
            device=sec.get("device", str, ""),
            precision=sec.choice("precision", ("fp64", "fp32", "tf32", "bf16", "fp16",
                                               "fp8"), ""),
            peak_flops=sec.number("peak_flops", None, low=0.0),
            bandwidth=sec.number("bandwidth", None, low=0.0),
            op_prefixes=sec.strings("op_prefixes", ()),
            top=sec.number("top", 12, low=1, high=200, integer=True),
            measure=sec.get("measure", bool, False),
        )
        for key in ("flops", "bytes", "peak_flops", "bandwidth"):
            value = getattr(cfg, key)
            if value is not None and value <= 0:
                raise sec.error(key, "must be above zero", "a positive number")
        sec.reject_unknown()
        return cfg


def _batches(sec: Section, target: Target) -> tuple[tuple[str, float], ...]:
    """``batches = {pp512 = 512}``: each key a guard, each value a batch of at least 1."""
    raw = sec.get("batches", dict, {})
    guards = [g.name for g in target.guards]
    out = []
    for name, value in raw.items():
        if name not in guards:
            raise sec.error("batches", f"names {name!r}, which is not a [[guards]] metric",
                            f"one of: {', '.join(guards) or '(no guards declared)'}")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
            raise sec.error("batches", f"{name} = {value!r} is not a batch size",
                            "a number of tokens, at least 1")
        out.append((str(name), float(value)))
    return tuple(out)
