"""A target's parts, built from its config: the target itself (with [run] overrides), its
journal and its proposer (its executor: :func:`assay.executors.platforms.build_executor`).
The verbs of :mod:`assay.api` and the subsystems beside them (finalize, plan) assemble a
run with these."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .config import spec as config_mod
from .config.spec import Target
from .errors import ConfigError
from .journal.store import JOURNAL_NAME, Journal
from .proposers.base import Proposer
from .proposers.queue import QueueProposer
from .registry import PROPOSERS

__all__ = ["build_proposer", "journal_path", "load", "open_journal"]


def load(root: str | Path = ".", config: str | None = None, **overrides: Any) -> Target:
    """Load the target; ``overrides`` replace [run] values (slots, budget, proposer ...)."""
    try:
        target = config_mod.load(root, config)
    except (OSError, UnicodeDecodeError) as exc:  # a folder, unreadable, not UTF-8 ...
        raise ConfigError(f"cannot read the config: {exc}", file=str(config or "assay.toml"),
                          valid="a UTF-8 TOML file") from None
    run_over = {k: v for k, v in overrides.items() if v is not None}
    for key, low, high in (("slots", 1, 1024), ("budget", 0, config_mod.BUDGET_MAX)):
        if key in run_over and (not isinstance(run_over[key], int)
                                or not low <= run_over[key] <= high):
            raise ConfigError(f"--{key} {run_over[key]!r} is out of range",
                              file=str(target.config_path), key=f"run.{key}",
                              valid=f"an integer from {low} to {high}")
    if run_over:
        if "slots" in run_over and target.run.gpus and len(target.run.gpus) != run_over["slots"]:
            raise ConfigError(f"--slots {run_over['slots']} does not match the "
                              f"{len(target.run.gpus)} GPU sets in [run] gpus",
                              file=str(target.config_path), key="run.slots")
        target = dataclasses.replace(target, run=dataclasses.replace(target.run, **run_over))
    return target


def journal_path(target: Target) -> Path:
    return target.state_dir / JOURNAL_NAME


def open_journal(target: Target, readonly: bool = False) -> Journal:
    return Journal.open(journal_path(target), readonly=readonly)


def build_proposer(target: Target, journal: Journal, name: str | None = None,
                   retry: bool = False) -> Proposer:
    make = PROPOSERS.for_config(name or target.run.proposer, str(target.config_path),
                                "run.proposer")
    prop: Proposer = make(target, journal)
    if retry and isinstance(prop, QueueProposer):
        prop.retry_tried()
    return prop
