"""Platforms: named groups of slots that are judged separately.

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
:mod:`assay.combine`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Section, Target

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
SKY_KEYS = ("instance_type", "cpus", "memory", "accelerators", "cloud", "region", "zone",
            "image_id", "nodes", "use_spot", "disk_size")


@dataclass(frozen=True)
class PlatformSpec:
    """One named group of slots, with how its slots are made."""

    name: str
    slots: int = 1
    primary: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    ray_resource: str = ""  # a Ray custom resource that marks this platform's nodes
    sky: Mapping[str, Any] = field(default_factory=dict)  # a SkyPilot pool of its own

    @property
    def kind(self) -> str:
        return "skypilot" if self.sky else "ray" if self.ray_resource else "local"


def parse_platforms(top: Section) -> tuple[PlatformSpec, ...]:
    """Validate ``[[platforms]]``; the first platform is primary unless one says so."""
    out: list[PlatformSpec] = []
    for sec in top.tables("platforms"):
        name = sec.get("name", str)
        if not NAME.match(name):
            raise sec.error("name", f"{name!r} is not a platform name",
                            "a letter, then letters, digits or _ (at most 32), e.g. \"arm64\"")
        slots = sec.number("slots", 1, low=1, high=1024, integer=True)
        env_sec = sec.table("env")
        env: dict[str, str] = {}
        for k, v in env_sec.data.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise env_sec.error(k, f"must be a string or number, got {v!r}")
            env[k] = str(v)
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
        first = out[0]
        out[0] = PlatformSpec(first.name, first.slots, True, first.env, first.ray_resource,
                              first.sky)
    return tuple(out)


def primary(target: Target) -> str:
    """The primary platform's name ('' when no platforms are declared)."""
    return next((p.name for p in target.platforms if p.primary), "")
