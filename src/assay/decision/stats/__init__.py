"""The decision engine: pure functions of the measured pairs, no I/O.

* :func:`calibrate` turns A/A blocks into per-slot noise, quarantined slots and the
  effective band δ;
* :func:`make_rule` maps ``DecisionSpec.rule`` to a rule: ``"fixed"`` (decision v1),
  ``"sequential"`` (:class:`SequentialRule`, group-sequential with alpha spending after
  Lan & DeMets 1983) or ``"expensive"`` (:class:`ExpensiveRule`, candidate-only runs
  against the slot's incumbent history).
"""

from __future__ import annotations

from ...config.spec import DecisionSpec
from ..rule import DecisionRule, FixedPairs
from .bounds import efficacy_bounds, planned_looks
from .calibrate import NoiseEstimate, calibrate, resolvable
from .expensive import ExpensiveRule
from .sequential import SequentialRule

__all__ = ["ExpensiveRule", "NoiseEstimate", "SequentialRule", "calibrate", "efficacy_bounds",
           "make_rule", "planned_looks", "resolvable"]


def make_rule(spec: DecisionSpec) -> DecisionRule:
    """The rule that ``spec.rule`` names."""
    if spec.rule == "fixed":
        return FixedPairs()
    if spec.rule == "sequential":
        return SequentialRule()
    if spec.rule == "expensive":
        return ExpensiveRule()
    raise ValueError(f"unknown decision rule {spec.rule!r}: fixed, sequential or expensive")
