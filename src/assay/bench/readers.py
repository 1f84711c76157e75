"""The metric readers a config names in ``[metric] reader`` (see assay.registry) that read
``name value`` pairs: each parses its format, then picks the metric the one shared way."""

from __future__ import annotations

from ..config.spec import MetricSpec
from .metrics import from_readings, parse_metric_lines, parse_summary_block


def metric_lines(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    """Lines ``METRIC name=value``."""
    return from_readings(spec, parse_metric_lines(text), where, text, suffix)


def summary_block(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    """``name: value`` lines after the last ``---``."""
    return from_readings(spec, parse_summary_block(text), where, text, suffix)
