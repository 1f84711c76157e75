"""Strict JSON for everything assay prints or serves: a non-finite float becomes null
(JSON has no NaN), keys are sorted, anything else unknown is written as its string."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON (a non-finite float is null): what every JSON output of assay prints."""
    try:  # the C encoder, in one pass; a NaN (or a key it cannot sort) takes the slow path
        return json.dumps(value, sort_keys=True, default=str, allow_nan=False, indent=indent)
    except (ValueError, TypeError):
        return json.dumps(_clean(value), sort_keys=True, default=str, allow_nan=False,
                          indent=indent)
