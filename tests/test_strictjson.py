"""Every JSON assay prints is strict JSON: a non-finite float is null, never NaN."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from assay.strictjson import dumps


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_become_null_at_any_depth(bad: float) -> None:
    value = {"pooled": bad, "slots": [{"noise": bad, "name": "s0"}], "ok": 1.5,
             "pair": (bad, 2.0)}
    out = _strict(dumps(value, indent=2))
    assert out == {"pooled": None, "slots": [{"noise": None, "name": "s0"}], "ok": 1.5,
                   "pair": [None, 2.0]}
    with pytest.raises(ValueError):
        _strict(json.dumps(value))  # what the plain encoder would have printed


def test_finite_values_and_unknown_objects_pass_through() -> None:
    class Tag:
        def __str__(self) -> str:
            return "tag"

    assert _strict(dumps({"b": 1, "a": [True, None, "x"], "t": Tag()})) == {
        "a": [True, None, "x"], "b": 1, "t": "tag"}
    assert dumps({"b": 1, "a": 2}).index('"a"') < dumps({"b": 1, "a": 2}).index('"b"')
