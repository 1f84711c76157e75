"""Platforms: named groups of slots that are judged separately, and one slot per GPU.

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

One slot per GPU: ``[run] slots = "auto"`` (or ``gpus = "all"``) makes one slot for each
GPU this host can see (``CUDA_VISIBLE_DEVICES`` when it is set, else ``nvidia-smi``), each
pinned to its GPU and given an equal share of the host's CPU cores.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ExecutorError

if TYPE_CHECKING:
    from .config import Target
    from .executors.base import Executor
    from .model import Slot
    from .workspace import Workspace

def primary(target: Target) -> str:
    """The primary platform's name ('' when no platforms are declared)."""
    return next((p.name for p in target.platforms if p.primary), "")


# -- GPUs ---------------------------------------------------------------------------------


def visible_gpus(env: Mapping[str, str] | None = None) -> list[int]:
    """The GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else nvidia-smi.

    ``CUDA_VISIBLE_DEVICES=""`` means no GPU. Non-numeric entries (GPU UUIDs, MIG names) are
    refused with a clear error, since a slot pins its GPU by index.
    """
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        items = [x.strip() for x in raw.split(",") if x.strip()]
        ids: list[int] = []
        for item in items:
            if not item.isdigit():
                raise ExecutorError(f"CUDA_VISIBLE_DEVICES={raw!r}: entry {item!r} is not a "
                                    "GPU index; slots = \"auto\" pins GPUs by index (e.g. 0,1)")
            ids.append(int(item))
        return ids
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExecutorError(f"nvidia-smi could not list the GPUs: {exc}") from None
    if out.returncode != 0:
        raise ExecutorError(f"nvidia-smi could not list the GPUs (exit {out.returncode}): "
                            f"{out.stderr.strip()[:200]}")
    return [int(x) for x in out.stdout.split() if x.strip().isdigit()]


def cpu_share(n_slots: int, cores: int | None = None) -> list[tuple[int, ...]]:
    """An equal, disjoint share of the host's cores for each of ``n_slots`` slots."""
    avail = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores is not None:
        avail = list(range(cores))
    if not avail:
        avail = list(range(os.cpu_count() or 1))
    per = max(1, len(avail) // max(1, n_slots))
    shares = []
    for i in range(n_slots):
        chunk = avail[i * per:(i + 1) * per] or [avail[i % len(avail)]]
        shares.append(tuple(chunk))
    return shares


def thread_env(cpus: Sequence[int]) -> dict[str, str]:
    """Thread-count variables that keep a benchmark inside its slot's CPU share."""
    n = str(max(1, len(cpus)))
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "ASSAY_SLOT_CPUS":
            ",".join(str(c) for c in cpus)}


# -- slots --------------------------------------------------------------------------------


def local_slots(target: Target, env: Mapping[str, str] | None = None) -> list[Slot]:
    """The local executor's slots: per platform, per GPU (``slots = "auto"``), or ``s0..``."""
    from .model import Slot

    if target.platforms:
        local = [p for p in target.platforms if p.kind == "local"]
        slots: list[Slot] = []
        for p in local:
            for i in range(p.slots):
                slots.append(Slot(name=f"{p.name}-{i}", platform=p.name,
                                  env=tuple(sorted(p.env.items()))))
        shares = cpu_share(len(slots))
        return [Slot(s.name, s.gpus, s.host, s.platform,
                     tuple(sorted({**dict(s.env), **thread_env(c)}.items())))
                for s, c in zip(slots, shares, strict=True)]
    if target.run.auto_gpus:
        ids = visible_gpus(env)
        if not ids:
            raise ExecutorError(
                "[run] slots = \"auto\" found no GPU: CUDA_VISIBLE_DEVICES is unset or empty "
                "and nvidia-smi lists none; set [run] slots to a number for CPU slots")
        shares = cpu_share(len(ids))
        return [Slot(name=f"gpu{g}", gpus=(g,), env=tuple(sorted(thread_env(c).items())))
                for g, c in zip(ids, shares, strict=True)]
    gpus = target.run.gpus
    return [Slot(name=f"s{i}", gpus=gpus[i] if gpus else ()) for i in range(target.run.slots)]


# -- executors ----------------------------------------------------------------------------


def build_executor(target: Target, ws: Workspace) -> Executor:
    """One executor per declared platform, behind a :class:`PlatformExecutor`.

    A local platform gets its own local slots. A Ray platform gets the nodes that carry its
    resource; several Ray platforms share the one cluster of ``[executor.ray] address``. A
    SkyPilot platform gets a pool of its own (``[executor.skypilot]`` with the platform's
    ``sky`` keys over it); with several, the first pool holds the Ray head and the others'
    nodes join it, each advertising its own platform's slot resource, so one driver talks
    to one cluster and a block still lands only on its platform's machines. Ray platforms
    and SkyPilot pools are not mixed in one run (the pools make their own cluster).
    """
    from .executors.base import Executor as _Executor
    from .executors.local import LocalExecutor
    from .executors.platforms import PlatformExecutor

    check_remote(target)
    slots = local_slots(target)
    children: dict[str, _Executor] = {}
    first_pool: Any = None
    try:
        for p in target.platforms:
            if p.kind == "local":
                mine = [s for s in slots if s.platform == p.name]
                children[p.name] = LocalExecutor(target, ws, slots=mine)
            elif p.kind == "ray":
                from .executors.ray import RayConfig, RayExecutor

                rcfg = dataclasses.replace(RayConfig.from_target(target),
                                           slot_resource=p.ray_resource, min_slots=p.slots,
                                           slot_prefix=f"{p.name}-")
                children[p.name] = RayExecutor(target, ws, rcfg)
            else:
                from .executors.ray import RayConfig
                from .executors.skypilot import (
                    SkyPilotExecutor,
                    SkyPilotLauncher,
                    platform_pool,
                )

                cfg = platform_pool(target, p)
                rcfg = dataclasses.replace(RayConfig.from_target(target),
                                           slot_resource=cfg.slot_resource,
                                           slot_prefix=f"{p.name}-")
                pool = SkyPilotExecutor(target, ws, cfg, SkyPilotLauncher(cfg), rcfg,
                                        join=first_pool)
                first_pool = first_pool or pool
                children[p.name] = pool
    except BaseException:
        for child in reversed(list(children.values())):
            child.close()
        raise
    return PlatformExecutor(children)


def check_remote(target: Target) -> None:
    """Refuse, before anything starts, remote platforms one driver cannot reach together."""
    ray_ps = [p for p in target.platforms if p.kind == "ray"]
    sky_ps = [p for p in target.platforms if p.kind == "skypilot"]
    if ray_ps and sky_ps:
        raise ExecutorError(
            f"platforms {', '.join(p.name for p in ray_ps)} (Ray) and "
            f"{', '.join(p.name for p in sky_ps)} (SkyPilot) in one run: the SkyPilot pools "
            "make a Ray cluster of their own and one driver talks to one cluster; declare "
            "every remote platform as a SkyPilot pool (sky = {...}) or every one as a Ray "
            "resource (ray_resource = ...)")
    if len(ray_ps) > 1 and not target.section("executor.ray").get("address", str, ""):
        raise ExecutorError(
            f"Ray platforms {', '.join(p.name for p in ray_ps)} share one Ray cluster and "
            "[executor.ray] address is not set; set it to the cluster whose nodes carry "
            f"the resources {', '.join(repr(p.ray_resource) for p in ray_ps)}")
    if len(sky_ps) > 1:
        from .executors.skypilot import platform_pool

        pools = [platform_pool(target, p) for p in sky_ps]
        clouds = {c.cloud.lower() for c in pools if c.cloud}
        regions = {c.region for c in pools if c.region}
        if len(clouds) > 1 or len(regions) > 1:
            said = "; ".join(f"{p.name}: cloud {c.cloud or '(open)'}, region "
                             f"{c.region or '(open)'}" for p, c in zip(sky_ps, pools,
                                                                        strict=True))
            raise ExecutorError(
                f"the SkyPilot pools of platforms {', '.join(p.name for p in sky_ps)} join "
                "one Ray cluster, so their nodes must reach each other's private addresses: "
                "name one cloud and region in [executor.skypilot], or leave them open "
                f"(the nodes then follow the first pool's head) ({said})")


# -- the decision across platforms --------------------------------------------------------


@dataclass(frozen=True)
class Combined:
    """What the loop does next for an experiment measured on several platforms.

    ``queue`` holds the blocks to queue now, each on its platform; ``final`` is the
    experiment's end (keep, discard, invalid) once it is known, else None.
    """

    queue: tuple[tuple[str, Any], ...] = ()  # (platform, Measure | Rerun)
    final: Any = None  # Keep | Discard | Invalid | None
    table: tuple[PlatformRow, ...] = ()


@dataclass(frozen=True)
class PlatformRow:
    """One platform's part in a decision, as stored and shown."""

    platform: str
    state: str  # 'keep', 'discard', 'invalid', 'measuring', 'waiting'
    effect: float | None = None
    lo: float | None = None
    hi: float | None = None
    pairs: int = 0
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(platform: str, action: Any) -> PlatformRow:
    from .decide import Discard, Invalid, Keep

    if action is None:
        return PlatformRow(platform, "waiting")
    d = getattr(action, "decision", None)
    eff = (d.effect, d.lo, d.hi, d.pairs_used) if d is not None else (None, None, None, 0)
    state = ("keep" if isinstance(action, Keep) else "discard" if isinstance(action, Discard)
             else "invalid" if isinstance(action, Invalid) else "measuring")
    reason = getattr(action, "reason", "") or (d.reason if d is not None else "")
    return PlatformRow(platform, state, eff[0], eff[1], eff[2], eff[3], reason)


def combine(actions: Mapping[str, Any], primary_name: str, keep_on: str,
            tolerance: float) -> Combined:
    """One experiment's next step from each platform's own action (None: a block pending).

    A candidate is kept when it clears delta on the primary platform (``keep_on =
    "primary"``) or on any (``"any"``), and no platform shows a regression beyond
    ``tolerance`` (its effect estimate below ``-tolerance``, the test a guard gets). A
    candidate that cannot be judged on one platform (it does not build, its checks fail,
    its benchmark crashes there) is invalid, with what happened on each platform.
    """
    from .decide import Discard, Invalid, Keep, Measure, Rerun

    table = tuple(_row(p, a) for p, a in actions.items())
    invalid = [(p, a) for p, a in actions.items() if isinstance(a, Invalid)]
    if invalid and any(a is None for a in actions.values()):
        return Combined(table=table)  # hear from every platform first: both sides are told
    if invalid:
        p, a = invalid[0]
        others = "; ".join(f"{r.platform}: {r.state}" if r.state == "invalid" else
                           f"{r.platform}: ran and measured ({r.state})"
                           for r in table if r.platform != p)
        return Combined(final=Invalid(f"on platform {p}: {a.reason}" +
                                      (f" (elsewhere: {others})" if others else ""),
                                      crashed=a.crashed, decision=a.decision), table=table)
    guard_fail = [(p, a) for p, a in actions.items() if isinstance(a, Discard)
                  and a.reason.startswith("the effect is real but")]
    if guard_fail:
        where, why = guard_fail[0]
        return Combined(final=Discard(f"on platform {where}: {why.reason}", why.decision),
                        table=table)
    prim = actions.get(primary_name)
    if keep_on == "primary" and isinstance(prim, Discard):
        return Combined(final=Discard(f"not an improvement on the primary platform "
                                      f"{primary_name}: {prim.reason}", prim.decision),
                        table=table)
    if keep_on == "any" and actions and all(isinstance(a, Discard) for a in actions.values()):
        return Combined(final=Discard("not an improvement on any platform: " + "; ".join(
            f"{p}: {a.reason}" for p, a in actions.items()), None), table=table)
    todo = tuple((p, a) for p, a in actions.items() if isinstance(a, Measure | Rerun))
    if todo or any(a is None for a in actions.values()):
        return Combined(queue=todo, table=table)
    worse = [r for r in table if r.effect is not None and r.effect < -tolerance]
    if worse:
        r = worse[0]
        return Combined(final=Discard(
            f"regresses on platform {r.platform}: {r.effect:+.2%} (tolerance "
            f"{tolerance:.2%})", getattr(actions[r.platform], "decision", None)), table=table)
    winners = [p for p, a in actions.items() if isinstance(a, Keep)]
    chosen = primary_name if keep_on == "primary" else (winners[0] if winners else "")
    won = actions.get(chosen)
    if isinstance(won, Keep):
        summary = "; ".join(f"{r.platform} {r.effect:+.2%}" if r.effect is not None
                            else f"{r.platform} -" for r in table)
        d = dataclasses.replace(
            won.decision, reason=f"{won.decision.reason} (per platform: {summary})",
            details={**won.decision.details, "platforms": [r.as_dict() for r in table],
                     "decided_on": chosen})
        return Combined(final=Keep(d), table=table)
    return Combined(final=Discard("no platform cleared delta", None), table=table)
