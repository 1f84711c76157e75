"""`assay.toml`: load, validate, and turn into a frozen :class:`Target`.

Every error names the file, the key, the line and what would be valid. Unknown keys are
errors (a typo must not silently become a default). Sections that belong to a subsystem
(``[proposer.llm]``, ``[executor.ray]``, ``[research]`` ...) are kept as validated raw
tables here and read by that subsystem through :class:`~assay.config.section.Section`, so each
subsystem owns its keys while errors keep the same shape.

A minimal file::

    [metric]
    name = "throughput"
    direction = "maximize"
    reader = "metric_lines"

    [commands]
    bench = "python bench.py"

    [scope]
    editable = ["src/**/*.py"]
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import registry
from ..errors import ConfigError
from ..model import Direction, ParamValue
from ..refname import branch_problem
from .fidelity import FidelitySpec, parse_fidelity
from .section import Section
from .watch import WatchSpec, from_table

CONFIG_NAME = "assay.toml"
WARM_UP = ("none", "incumbent", "all")
READERS = registry.READERS.names
PARAM_TYPES = ("int", "float", "categorical", "bool")
PARAM_APPLY = ("env", "assign")
SAMPLERS = registry.SAMPLERS.names
PROPOSERS = registry.PROPOSERS.names
EXECUTORS = registry.EXECUTORS.names
DECISION_RULES = ("fixed", "sequential", "expensive")
HOOK_EVENTS = ("on_keep", "on_experiment", "on_error", "on_finish")
BUDGET_MAX = 1_000_000  # experiments in one run; far beyond any real run, within SQLite
PLATFORM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
SKY_KEYS = ("instance_type", "cpus", "memory", "accelerators", "cloud", "region", "zone",
            "image_id", "nodes", "use_spot", "disk_size")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    direction: Direction = Direction.MAXIMIZE
    unit: str = ""
    reader: str = "metric_lines"
    json_path: str = ""  # for reader = "json": dotted path, list indices as numbers
    source: str = "stdout"  # "stdout" or a file path (relative to the worktree) to read
    bounds: tuple[float, float] | None = None
    tolerance: float = 0.0  # guards: the relative regression allowed
    target: float | None = None  # the run stops once the best reaches it (or a bound)
    watch: WatchSpec | None = None  # progress lines and early-stop conditions (assay.config.watch)


@dataclass(frozen=True)
class Command:
    cmd: str
    timeout_s: float


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[ParamValue, ...] = ()
    apply: str = "env"
    file: str = ""  # for apply = "assign": the file holding `NAME = value`
    default: ParamValue | None = None

    def grid(self) -> list[ParamValue]:
        """The values a grid search walks (explicit choices, or the integer range)."""
        if self.choices:
            return list(self.choices)
        if self.type == "bool":
            return [False, True]
        if self.type == "int" and self.low is not None and self.high is not None:
            step = int(self.step or 1)
            return list(range(int(self.low), int(self.high) + 1, step))
        raise ValueError(f"parameter {self.name} has no finite grid; give choices or a step")


@dataclass(frozen=True)
class DecisionSpec:
    rule: str = "sequential"
    pairs_per_block: int = 2  # ABBA = two pairs
    max_pairs: int = 24
    min_pairs: int = 2
    confidence: float = 0.90
    delta: float = 0.01  # minimum effect, as a fraction (0.01 = 1%)
    confirm: bool = True
    aa_blocks: int = 2  # calibration blocks per slot at the start of a run
    aa_blocks_given: bool = False  # written in the file (an override of it is announced)
    keep_on: str = "primary"  # with [[platforms]]: clear delta on the primary one, or "any"
    platform_tolerance: float = 0.02  # the regression another platform may show


@dataclass(frozen=True)
class RunSpec:
    slots: int = 1
    gpus: tuple[tuple[int, ...], ...] = ()  # per slot
    budget: int = 20  # experiments
    max_hours: float | None = None
    proposer: str = "sweep"
    executor: str = "local"
    seed: int = 0
    name: str = ""
    auto_gpus: bool = False  # slots = "auto" / gpus = "all": one slot per visible GPU
    # environment variables naming a compile cache (TORCHINDUCTOR_CACHE_DIR,
    # TRITON_CACHE_DIR): each slot gets its own folder under .assay/cache/<slot>/
    compile_cache: tuple[str, ...] = ()
    # "none", "incumbent" (one unmeasured run per slot for each incumbent, before its
    # first measured run) or "all" (also before each candidate's first run)
    warm_up: str = "none"
    # measure the baseline against the final best in ABBA blocks when a run ends (when
    # something was kept and the time budget allows); `assay verify` does it on demand
    verify: bool = True
    # with two or more keeps, the verification also runs the baseline and every kept commit
    # together in this many rounds (assay.measure.chain): steps that compound to their total
    chain_rounds: int = 6
    # spending caps on model calls (assay.bench.meter): the whole run, and one `assay run`
    max_usd: float | None = None
    max_tokens: int | None = None
    session_max_usd: float | None = None
    session_max_tokens: int | None = None
    # stop after this many decided experiments in a row without a keep (None: never)
    stop_after_discards: int | None = None


@dataclass(frozen=True)
class EnvSpec:
    """What reaches benchmark and agent processes: an allowlist, plus fixed values."""

    allow: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER",
                              "PYTHONPATH", "VIRTUAL_ENV", "TERM")
    set: Mapping[str, str] = field(default_factory=dict)
    # a command run once per session in the target's root; its `key: value` lines are added
    # to the session's environment fingerprint (cuDNN, the framework's CUDA, a corpus hash)
    fingerprint: str = ""


@dataclass(frozen=True)
class LimitSpec:
    memory_mb: int | None = None
    cpu_s: int | None = None
    network: bool | None = None  # None: not set (no network inside the sandbox)


@dataclass(frozen=True)
class PlatformSpec:
    """One named group of slots, with how its slots are made.

    A portable project is judged per platform: a change that wins on x86 and regresses on ARM
    is not a win. ``[[platforms]]`` declares the groups::

        [[platforms]]
        name = "x86"
        slots = 2                  # local slots of this group
        primary = true             # the platform a keep must clear delta on (see below)
        env = { ARCH_HINT = "x86" }  # set in this group's benchmark processes

        [[platforms]]
        name = "arm"
        ray_resource = "arm"       # on Ray: slots on nodes that carry this custom resource
        sky = { instance_type = "c7g.4xlarge", nodes = 1 }   # or a SkyPilot pool of its own

    Each platform is calibrated and tracked for noise on its own slots; every candidate is
    measured on every platform; ``[decision] keep_on`` says whether it must clear delta on the
    primary platform (default) or on any, and no other platform may show a regression beyond
    ``[decision] platform_tolerance`` (the same test a guard metric gets).

    The local slots of a platform are made in :mod:`assay.executors.local`, its executor in
    :mod:`assay.executors.platforms`, and the decision across platforms in
    :mod:`assay.decision.combine`.
    """

    name: str
    slots: int = 1
    primary: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    ray_resource: str = ""  # a Ray custom resource that marks this platform's nodes
    sky: Mapping[str, Any] = field(default_factory=dict)  # a SkyPilot pool of its own

    @property
    def kind(self) -> str:
        return "skypilot" if self.sky else "ray" if self.ray_resource else "local"


def primary_platform(target: Target) -> str:
    """The primary platform's name ('' when no platforms are declared)."""
    return next((p.name for p in target.platforms if p.primary), "")


@dataclass(frozen=True)
class Target:
    """A repository plus its validated config."""

    root: Path
    config_path: Path
    metric: MetricSpec
    guards: tuple[MetricSpec, ...]
    bench: Command
    build: Command | None
    checks: Command | None
    holdout: Command | None
    holdout_metric: MetricSpec | None
    editable: tuple[str, ...]
    protected: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    run: RunSpec
    decision: DecisionSpec
    env: EnvSpec
    limits: LimitSpec
    hooks: Mapping[str, Command]
    brief: str  # path of the task brief, relative to root ('' if none)
    sections: Mapping[str, Mapping[str, Any]]  # raw subsystem tables, see `section()`
    text: str = ""
    platforms: tuple[PlatformSpec, ...] = ()
    holdout_files: tuple[str, ...] = ()  # [scope] holdout: hidden from proposers
    # A command run on the incumbent and the candidate whose outputs must agree.
    compare: Command | None = None
    compare_rtol: float = 0.0
    compare_atol: float = 0.0
    fidelity: FidelitySpec | None = None  # [fidelity]: the levels a candidate climbs

    def section(self, dotted: str) -> Section:
        """A subsystem's table (``"proposer.llm"``, ``"executor.ray"``) as a Section."""
        data: Any = self.sections
        for part in dotted.split("."):
            data = data.get(part, {}) if isinstance(data, dict) else {}
        return Section(data if isinstance(data, dict) else {}, dotted,
                       str(self.config_path), self.text)

    @property
    def state_dir(self) -> Path:
        return self.root / ".assay"

    def is_editable(self, path: str) -> bool:
        return any(glob_match(path, g) for g in self.editable)

    def is_protected(self, path: str) -> bool:
        return any(glob_match(path, g) for g in (*self.protected, *self.holdout_files)) \
            or path == CONFIG_NAME


def glob_match(path: str, pattern: str) -> bool:
    """Match a repository-relative POSIX path against a glob where ``**`` spans folders."""
    path = path.lstrip("./") if path.startswith("./") else path
    if pattern.endswith("/"):
        pattern += "**"
    if fnmatch.fnmatchcase(path, pattern):
        return True
    if "**/" in pattern:  # `a/**/b` also matches `a/b`
        return fnmatch.fnmatchcase(path, pattern.replace("**/", ""))
    return False


def _metric(sec: Section, guard: bool = False) -> MetricSpec:
    name = sec.get("name", str)
    if not name.strip():
        raise sec.error("name", "must not be empty", "the name the benchmark prints, e.g. "
                        '"speed" for a line METRIC speed=123')
    direction = Direction(sec.choice("direction", [d.value for d in Direction],
                                     Direction.MAXIMIZE.value))
    reader = sec.choice("reader", READERS, "metric_lines")
    json_path = sec.get("json_path", str, "")
    if reader == "json" and not json_path:
        raise sec.error("json_path", "is required when reader = \"json\"",
                        'a dotted path such as "results.0.tokens_per_s"')
    bounds_raw = sec.get("bounds", list, None, valid="[low, high]")
    bounds = None
    if bounds_raw is not None:
        if len(bounds_raw) != 2 or not all(isinstance(b, (int, float)) and not isinstance(
                b, bool) and not math.isnan(b) for b in bounds_raw):
            raise sec.error("bounds", f"must be two numbers, got {bounds_raw!r}", "[low, high]")
        bounds = (float(bounds_raw[0]), float(bounds_raw[1]))
        if bounds[0] >= bounds[1]:
            raise sec.error("bounds", "low must be below high", "[low, high] with low < high")
    tol = sec.number("tolerance", 0.0 if not guard else 0.02, low=0.0, high=10.0)
    goal = None if guard else sec.number("target", None)
    watch = None
    if not guard and sec.has("watch"):
        wsec = sec.table("watch")
        watch = from_table(wsec.data, "metric.watch",
                           lambda key, msg, valid: wsec.error(key, msg, valid))
    spec = MetricSpec(name=name, direction=direction, unit=sec.get("unit", str, ""),
                      reader=reader, json_path=json_path,
                      source=sec.get("source", str, "stdout"), bounds=bounds, tolerance=tol,
                      watch=watch, target=None if goal is None else float(goal))
    sec.reject_unknown()
    return spec


def _command(sec: Section, key: str, default_timeout: float, required: bool = False
             ) -> Command | None:
    if not sec.has(key):
        sec.known(f"{key}_timeout")
        if required:
            raise sec.error(key, "is required: the command that prints the metric",
                            'a shell command, e.g. "python bench.py"')
        return None
    sec.known(f"{key}_timeout")
    cmd = sec.get(key, str)
    if not cmd.strip():
        raise sec.error(key, "must not be empty", "a shell command")
    timeout = sec.number(f"{key}_timeout", default_timeout, low=0.001)
    return Command(cmd, float(timeout))


def _param(sec: Section) -> ParamSpec:
    name = sec.get("name", str)
    if not name.isidentifier():
        raise sec.error("name", f"{name!r} is not a valid identifier",
                        "letters, digits and underscores, not starting with a digit")
    ptype = sec.choice("type", PARAM_TYPES)
    low = sec.number("low", None)
    high = sec.number("high", None)
    choices = sec.get("choices", list, [])
    if ptype in ("int", "float") and not choices:
        if low is None or high is None:
            raise sec.error("low" if low is None else "high",
                            f"is required for a {ptype} parameter without choices",
                            "low and high numbers, or a list of choices")
        if low >= high:
            raise sec.error("high", f"must be above low ({low})", f"a number > {low}")
    if ptype == "categorical" and not choices:
        raise sec.error("choices", "is required for a categorical parameter",
                        "a non-empty list of values")
    log = sec.get("log", bool, False)
    if log and low is not None and low <= 0:
        raise sec.error("low", "must be > 0 when log = true", "a positive number")
    apply = sec.choice("apply", PARAM_APPLY, "env")
    file = sec.get("file", str, "")
    if apply == "assign" and not file:
        raise sec.error("file", "is required when apply = \"assign\"",
                        "the file that holds the assignment NAME = value")
    step = sec.number("step", None, low=0.0)
    default_kinds: dict[str, tuple[type, ...]] = {
        "int": (int,), "float": (int, float), "bool": (bool,),
        "categorical": (int, float, str, bool)}
    default = sec.get("default", default_kinds[ptype], None, valid=f"a {ptype} value")
    if ptype == "categorical" and default is not None and default not in choices:
        raise sec.error("default", f"{default!r} is not one of the choices {choices}")
    if ptype != "float" and isinstance(sec.data.get("default"), int):
        default = sec.data["default"]  # keep TOML's integer: `N = 2`, not `N = 2.0`
    sec.reject_unknown()
    return ParamSpec(name=name, type=ptype, low=low, high=high, log=log, step=step,
                     choices=tuple(choices), apply=apply, file=file, default=default)


def _gpus(sec: Section, slots: int) -> tuple[tuple[int, ...], ...]:
    if sec.data.get("gpus") == "all":
        sec.get("gpus", str)
        return ()
    raw = sec.get("gpus", list, [], valid='a list of GPU ids, one per slot, or of lists, '
                  'or "all"')
    out: list[tuple[int, ...]] = []
    for item in raw:
        if isinstance(item, int) and not isinstance(item, bool):
            out.append((item,))
        elif isinstance(item, list) and all(isinstance(i, int) for i in item):
            out.append(tuple(item))
        else:
            raise sec.error("gpus", f"entry {item!r} is not a GPU id or a list of ids",
                            "e.g. [0, 1] or [[0, 1], [2, 3]]")
    if out and len(out) != slots:
        raise sec.error("gpus", f"gives {len(out)} GPU sets for {slots} slots",
                        "one entry per slot (or set slots to match)")
    return tuple(out)


def _toml(text: str, file: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML: {exc}", file=file,
                          valid="TOML syntax, see https://toml.io") from None


def _target(top: Section) -> tuple[str, str]:
    """``[target]``: the brief's path and the run's name."""
    sec = top.table("target")
    brief = sec.get("brief", str, "")
    run_name = sec.get("name", str, "")
    if run_name and branch_problem(run_name):
        raise sec.error("name", f"{run_name!r} {branch_problem(run_name)}",
                        "a git branch name such as \"speed-1\" or \"ops/softmax\"")
    sec.reject_unknown()
    return brief, run_name


def _holdout_metric(top: Section, holdout: Command | None) -> MetricSpec | None:
    """``[holdout_metric]``, which only ``commands.holdout`` can produce."""
    if not top.has("holdout_metric"):
        return None
    spec = _metric(top.table("holdout_metric"))
    if holdout is None:
        raise top.error("holdout_metric", "needs commands.holdout to produce it",
                        "add commands.holdout, or remove [holdout_metric]")
    return spec


def _scope(top: Section) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``[scope]``: the editable, protected and holdout globs."""
    scope = top.table("scope", required=True)
    editable = scope.strings("editable")
    if not editable:
        raise scope.error("editable", "must name at least one glob", 'e.g. ["src/**/*.py"]')
    protected = scope.strings("protected", ())
    # files only the holdout reads: never in a proposer's checkout, and protected
    holdout_files = scope.strings("holdout", ())
    for glob in (*editable, *protected):
        if glob.startswith("/") or ".." in Path(glob).parts:
            raise scope.error("editable" if glob in editable else "protected",
                              f"{glob!r} escapes the repository",
                              "globs relative to the repository root")
    for glob in editable:
        cover = next((g for g in (*protected, *holdout_files) if glob_match(glob, g)), None)
        if cover is not None:
            raise scope.error("editable", f"{glob!r} lies inside the protected {cover!r}: no "
                              "file it names could be changed",
                              "editable globs outside protected and holdout")
    scope.reject_unknown()
    return editable, protected, holdout_files


def _params(top: Section, protected: tuple[str, ...]) -> tuple[ParamSpec, ...]:
    """``[[params]]``: unique names, none rewriting a protected file."""
    params = tuple(_param(s) for s in top.tables("params"))
    names = [p.name for p in params]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise top.error("params", f"parameter names repeat: {sorted(dupes)}", "unique names")
    for i, p in enumerate(params):
        if p.apply == "assign" and any(glob_match(p.file, g) for g in protected):
            raise top.error(f"params[{i}].file",
                            f"parameter {p.name} rewrites {p.file}, a protected path",
                            "a file inside the editable scope")
    return params


def _run(top: Section, run_name: str) -> RunSpec:
    """``[run]``: slots (a number, or one per visible GPU), budgets and backends."""
    rsec = top.table("run")
    auto_gpus = rsec.data.get("slots") == "auto" or rsec.data.get("gpus") == "all"
    if auto_gpus and rsec.data.get("gpus") not in (None, "all"):
        raise rsec.error("gpus", 'lists GPU ids while slots = "auto" picks them itself',
                         'drop gpus, or give slots as a number')
    if rsec.data.get("slots") == "auto":
        rsec.get("slots", str)
        slots = 1
    else:
        slots = rsec.number("slots", 1, low=1, high=1024, integer=True)
    run = RunSpec(
        slots=slots,
        gpus=_gpus(rsec, slots),
        budget=rsec.number("budget", 20, low=1, high=BUDGET_MAX, integer=True),
        max_hours=rsec.number("max_hours", None, low=0.001),
        proposer=rsec.choice("proposer", PROPOSERS, "sweep"),
        executor=rsec.choice("executor", EXECUTORS, "local"),
        seed=rsec.number("seed", 0, integer=True),
        name=run_name,
        compile_cache=rsec.strings("compile_cache", ()),
        warm_up=rsec.choice("warm_up", WARM_UP, "none"),
        verify=rsec.get("verify", bool, True),
        chain_rounds=rsec.number("chain_rounds", 6, low=0, high=1000, integer=True),
        auto_gpus=auto_gpus,
        max_usd=rsec.number("max_usd", None, low=0.0),
        max_tokens=rsec.number("max_tokens", None, low=1, integer=True),
        session_max_usd=rsec.number("session_max_usd", None, low=0.0),
        session_max_tokens=rsec.number("session_max_tokens", None, low=1, integer=True),
        stop_after_discards=rsec.number("stop_after_discards", None, low=1, integer=True),
    )
    rsec.reject_unknown()
    return run


def _decision(top: Section) -> DecisionSpec:
    """``[decision]``: the rule and its parameters."""
    dsec = top.table("decision")
    pairs_per_block = dsec.number("pairs_per_block", 2, low=1, high=64, integer=True)
    decision = DecisionSpec(
        rule=dsec.choice("rule", DECISION_RULES, "sequential"),
        pairs_per_block=pairs_per_block,
        max_pairs=dsec.number("max_pairs", 24, low=1, high=10_000, integer=True),
        min_pairs=dsec.number("min_pairs", 2, low=1, high=10_000, integer=True),
        confidence=dsec.number("confidence", 0.90, low=0.5, high=0.9999),
        delta=dsec.number("delta", 0.01, low=0.0, high=10.0),
        confirm=dsec.get("confirm", bool, True),
        aa_blocks=dsec.number("aa_blocks", 2, low=0, high=100, integer=True),
        aa_blocks_given="aa_blocks" in dsec.data,
        keep_on=dsec.choice("keep_on", ("primary", "any"), "primary"),
        platform_tolerance=dsec.number("platform_tolerance", 0.02, low=0.0, high=10.0),
    )
    if decision.delta >= 1.0:
        raise dsec.error("delta", f"{decision.delta:g} means {decision.delta:.0%}: no real "
                         "change beats the incumbent by that much",
                         f"a fraction below 1, e.g. delta = {decision.delta / 100:g} for "
                         f"{decision.delta:g}%")
    if decision.max_pairs < decision.min_pairs:
        raise dsec.error("max_pairs", f"must be >= min_pairs ({decision.min_pairs})")
    dsec.reject_unknown()
    return decision


def _env(top: Section) -> EnvSpec:
    """``[env]``: what reaches benchmark and agent processes."""
    esec = top.table("env")
    env = EnvSpec(allow=esec.strings("allow", EnvSpec().allow),
                  set=_str_table(esec, "set"), fingerprint=esec.get("fingerprint", str, ""))
    esec.reject_unknown()
    return env


def _limits(top: Section) -> LimitSpec:
    """``[limits]``: memory, CPU time and network of a benchmark process."""
    lsec = top.table("limits")
    limits = LimitSpec(memory_mb=lsec.number("memory_mb", None, low=1, integer=True),
                       cpu_s=lsec.number("cpu_s", None, low=1, integer=True),
                       network=lsec.get("network", bool, None))
    lsec.reject_unknown()
    return limits


def _hooks(top: Section) -> dict[str, Command]:
    """``[hooks]``: a command per event."""
    hsec = top.table("hooks")
    hooks: dict[str, Command] = {}
    for event in HOOK_EVENTS:
        cmd = _command(hsec, event, 60.0)
        if cmd is not None:
            hooks[event] = cmd
    hsec.reject_unknown()
    return hooks


def _platforms(top: Section, run: RunSpec) -> tuple[PlatformSpec, ...]:
    """``[[platforms]]``; the first platform is primary unless one says so."""
    out: list[PlatformSpec] = []
    for sec in top.tables("platforms"):
        name = sec.get("name", str)
        if not PLATFORM_NAME.match(name):
            raise sec.error("name", f"{name!r} is not a platform name",
                            "a letter, then letters, digits or _ (at most 32), e.g. \"arm64\"")
        slots = sec.number("slots", 1, low=1, high=1024, integer=True)
        env = _str_table(sec, "env")
        sky_sec = sec.table("sky")
        for k in sky_sec.data:
            if k not in SKY_KEYS:
                raise sky_sec.error(k, "is not a SkyPilot pool key here",
                                    ", ".join(SKY_KEYS))
        sky = dict(sky_sec.data)
        ray_resource = sec.get("ray_resource", str, "")
        if sky and ray_resource:
            raise sec.error("sky", "a platform is either a SkyPilot pool or a Ray resource",
                            "keep one of sky and ray_resource")
        out.append(PlatformSpec(name=name, slots=slots, primary=sec.get("primary", bool, False),
                                env=env, ray_resource=ray_resource, sky=sky))
        sec.reject_unknown()
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise top.error("platforms", f"platform names repeat: {dupes}", "one name per platform")
    primaries = [p for p in out if p.primary]
    if len(primaries) > 1:
        raise top.error("platforms", f"{len(primaries)} platforms say primary = true "
                        f"({', '.join(p.name for p in primaries)})", "at most one")
    if out and not primaries:
        out[0] = dataclasses.replace(out[0], primary=True)
    if out and run.auto_gpus:
        raise top.table("run").error("slots", 'slots = "auto" and [[platforms]] both say how '
                                     "slots are made",
                                     "declare slots per platform, or drop [[platforms]]")
    return tuple(out)


def _subsystems(top: Section) -> dict[str, Mapping[str, Any]]:
    """The raw tables each subsystem validates itself (see :class:`Section`)."""
    return {key: top.table(key).data
            for key in ("proposer", "executor", "research", "stats", "finalize", "prices")}


def parse(text: str, root: Path, file: str = CONFIG_NAME) -> Target:
    """Validate the text of an assay.toml for the repository at ``root``."""
    top = Section(_toml(text, file), "", file, text)
    brief, run_name = _target(top)
    metric = _metric(top.table("metric", required=True))
    guards = tuple(_metric(s, guard=True) for s in top.tables("guards"))

    cmds = top.table("commands", required=True)
    bench = _command(cmds, "bench", 600.0, required=True)
    assert bench is not None
    build = _command(cmds, "build", 1800.0)
    checks = _command(cmds, "checks", 600.0)
    holdout = _command(cmds, "holdout", 600.0)
    compare = _command(cmds, "compare", 600.0)
    compare_rtol = float(cmds.number("compare_rtol", 0.0, low=0.0))
    compare_atol = float(cmds.number("compare_atol", 0.0, low=0.0))
    cmds.reject_unknown()

    holdout_metric = _holdout_metric(top, holdout)
    editable, protected, holdout_files = _scope(top)
    params = _params(top, protected)
    fidelity = parse_fidelity(top, [p.name for p in params])
    run = _run(top, run_name)
    decision = _decision(top)
    env = _env(top)
    limits = _limits(top)
    hooks = _hooks(top)
    platforms = _platforms(top, run)
    if fidelity is not None and platforms:
        raise top.error("fidelity", "[fidelity] levels and [[platforms]] cannot be combined: "
                        "a candidate's climb through the levels is decided on one platform",
                        "one of them: drop [[platforms]], or [fidelity]")
    subsystems = _subsystems(top)
    top.reject_unknown()

    return Target(root=root, config_path=root / file, metric=metric, guards=guards,
                  bench=bench, build=build, checks=checks, holdout=holdout,
                  holdout_metric=holdout_metric, editable=editable, protected=protected,
                  params=params, run=run, decision=decision, env=env, limits=limits,
                  hooks=hooks, brief=brief, sections=subsystems, text=text,
                  platforms=platforms, holdout_files=holdout_files, compare=compare,
                  compare_rtol=compare_rtol, compare_atol=compare_atol, fidelity=fidelity)


def _str_table(sec: Section, key: str) -> dict[str, str]:
    t = sec.table(key)
    out: dict[str, str] = {}
    for k, v in t.data.items():
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise t.error(k, f"must be a string or number, got {v!r}")
        out[k] = str(v)
    return out


def load(root: str | os.PathLike[str] = ".", file: str | None = None) -> Target:
    """Load ``assay.toml`` from the repository at ``root``."""
    root_path = Path(root).resolve()
    path = Path(file) if file else root_path / CONFIG_NAME
    if not path.is_absolute():
        path = root_path / path
    if not path.exists():
        raise ConfigError("no such file; create one with `assay init`", file=str(path),
                          valid="an assay.toml at the repository root")
    text = path.read_text(encoding="utf-8")
    target = parse(text, root_path, str(path))
    return target
