"""`assay.toml`: load, validate, and turn into a frozen :class:`Target`.

Every error names the file, the key, the line and what would be valid. Unknown keys are
errors (a typo must not silently become a default). Sections that belong to a subsystem
(``[proposer.llm]``, ``[executor.ray]``, ``[research]`` ...) are kept as validated raw
tables here and read by that subsystem through :class:`Section`, so each subsystem owns its
keys while errors keep the same shape.

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

import difflib
import fnmatch
import math
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from . import registry
from .errors import ConfigError
from .model import Direction, ParamValue
from .platforms import PlatformSpec, parse_platforms
from .refname import branch_problem
from .tomlpos import key_line
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

T = TypeVar("T")


class Section:
    """A validated view of one TOML table: typed getters whose errors point at the line."""

    def __init__(self, data: Mapping[str, Any], path: str, file: str, text: str) -> None:
        self.data = dict(data)
        self.path = path
        self.file = file
        self.text = text
        self._used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str, valid: str = "") -> ConfigError:
        dotted = self._key(key) if key else self.path
        return ConfigError(message, file=self.file, key=dotted,
                           line=key_line(self.text, dotted), valid=valid)

    def has(self, key: str) -> bool:
        self._used.add(key)  # asked about: a known key, listed when another one is misspelled
        return key in self.data

    def known(self, *keys: str) -> None:
        """Declare keys this section accepts though they were not read (optional ones)."""
        self._used.update(keys)

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = ...,
            valid: str = "") -> Any:
        self._used.add(key)
        if key not in self.data:
            if default is ...:
                raise self.error(key, f"is required but missing: add `{key} = ...` to "
                                 f"[{self.path or 'the top of the file'}]", valid)
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in kinds and isinstance(value, bool):
            raise self.error(key, f"must be {_kind_name(kinds)}, got a boolean", valid)
        if not isinstance(value, kinds):
            raise self.error(key, f"must be {_kind_name(kinds)}, got {type(value).__name__} "
                             f"{value!r}", valid)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}", valid)
        return value

    def choice(self, key: str, choices: Sequence[str], default: Any = ...) -> Any:
        value = self.get(key, str, default, valid=", ".join(choices))
        if value is not default and value not in choices:
            raise self.error(key, f"{value!r} is not one of the choices", ", ".join(choices))
        return value

    def number(self, key: str, default: Any = ..., *, low: float | None = None,
               high: float | None = None, integer: bool = False) -> Any:
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        rng = f"{'an integer' if integer else 'a number'}"
        if low is not None:
            rng += f" >= {low:g}"
        if high is not None:
            rng += f" <= {high:g}"
        value = self.get(key, kinds, default, valid=rng)
        if value is default or value is None:
            return value
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.error(key, f"{value!r} is out of range", rng)
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default, valid='a list of strings, e.g. ["a", "b"]')
        if value is default:
            return tuple(value) if isinstance(value, (list, tuple)) else value
        for item in value:
            if not isinstance(item, str):
                raise self.error(key, f"must hold only strings, found {item!r}",
                                 "a list of strings")
        return tuple(value)

    def table(self, key: str, required: bool = False) -> Section:
        self._used.add(key)
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.error(key, f"table is required but missing: add a [{self._key(key)}]"
                                 " table")
            value = {}
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table ([{self._key(key)}] with `key = value` "
                             f"lines), got {type(value).__name__}")
        return Section(value, self._key(key), self.file, self.text)

    def tables(self, key: str) -> list[Section]:
        self._used.add(key)
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, "must be an array of tables ([[" + self._key(key) + "]])")
        return [Section(v, f"{self._key(key)}[{i}]", self.file, self.text)
                for i, v in enumerate(value)]

    def reject_unknown(self, extra_ok: Iterable[str] = ()) -> None:
        allowed = self._used | set(extra_ok)
        for key in self.data:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(key, f"is not a known key{hint}",
                                 ", ".join(sorted(allowed)) or "no keys here")


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


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
    watch: WatchSpec | None = None  # progress lines and early-stop conditions (assay.watch)


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
    # together in this many rounds (assay.chain): steps that compound to their total
    chain_rounds: int = 6
    # spending caps on model calls (assay.meter): the whole run, and one `assay run`
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


def parse(text: str, root: Path, file: str = CONFIG_NAME) -> Target:
    """Validate the text of an assay.toml for the repository at ``root``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML: {exc}", file=file,
                          valid="TOML syntax, see https://toml.io") from None
    top = Section(data, "", file, text)
    target_sec = top.table("target")
    brief = target_sec.get("brief", str, "")
    run_name = target_sec.get("name", str, "")
    if run_name and branch_problem(run_name):
        raise target_sec.error("name", f"{run_name!r} {branch_problem(run_name)}",
                               "a git branch name such as \"speed-1\" or \"ops/softmax\"")
    target_sec.reject_unknown()

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
    holdout_metric = None
    if top.has("holdout_metric"):
        holdout_metric = _metric(top.table("holdout_metric"))
        if holdout is None:
            raise top.error("holdout_metric", "needs commands.holdout to produce it",
                            "add commands.holdout, or remove [holdout_metric]")

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

    esec = top.table("env")
    env = EnvSpec(allow=esec.strings("allow", EnvSpec().allow),
                  set=_str_table(esec, "set"), fingerprint=esec.get("fingerprint", str, ""))
    esec.reject_unknown()
    lsec = top.table("limits")
    limits = LimitSpec(memory_mb=lsec.number("memory_mb", None, low=1, integer=True),
                       cpu_s=lsec.number("cpu_s", None, low=1, integer=True),
                       network=lsec.get("network", bool, None))
    lsec.reject_unknown()

    hsec = top.table("hooks")
    hooks: dict[str, Command] = {}
    for event in HOOK_EVENTS:
        cmd = _command(hsec, event, 60.0)
        if cmd is not None:
            hooks[event] = cmd
    hsec.reject_unknown()

    platforms = parse_platforms(top)
    if platforms and auto_gpus:
        raise rsec.error("slots", 'slots = "auto" and [[platforms]] both say how slots are '
                         "made", "declare slots per platform, or drop [[platforms]]")

    subsystems = {}
    for key in ("proposer", "executor", "research", "stats", "finalize", "prices"):
        sub = top.table(key)
        subsystems[key] = sub.data
    top.reject_unknown()

    return Target(root=root, config_path=root / file, metric=metric, guards=guards,
                  bench=bench, build=build, checks=checks, holdout=holdout,
                  holdout_metric=holdout_metric, editable=editable, protected=protected,
                  params=params, run=run, decision=decision, env=env, limits=limits,
                  hooks=hooks, brief=brief, sections=subsystems, text=text,
                  platforms=platforms, holdout_files=holdout_files, compare=compare,
                  compare_rtol=compare_rtol, compare_atol=compare_atol)


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
