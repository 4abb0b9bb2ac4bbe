"""evalpipe.jsonfast: orjson's text is used only where it is exactly the json module's."""

from __future__ import annotations

import datetime
import json
import math
import random
import struct
from dataclasses import dataclass
from typing import Any

import pytest

from evalpipe.jsonfast import compact
from evalpipe.report.browser import json_for_script


def _default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default).encode


@dataclass(frozen=True)
class _Point:
    x: int


def _random_floats(count: int) -> list[float]:
    rng = random.Random(7)
    out: list[float] = []
    while len(out) < count:
        bits = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        scaled = rng.random() * 10 ** rng.randint(-12, 20) * rng.choice((1, -1))
        rounded = round(rng.random(), rng.randint(1, 8)) * 10 ** rng.randint(-8, 3)
        out.extend(v for v in (bits, scaled, rounded) if math.isfinite(v))
    return out


def test_floats_are_written_as_json_writes_them_or_left_to_json() -> None:
    for value in _random_floats(30_000):
        data = {"x": [value, "s"], "y": value}
        text = compact(data, _default)
        assert text is None or text == _JSON(data), value


@pytest.mark.parametrize("value", [1e-05, 1e-07, 9.999999999999999e-05, 5e-324, -2.5e-06])
def test_small_floats_go_to_json(value: float) -> None:
    assert compact([value], _default) is None
    assert json_for_script([value]) == _JSON([value])


@pytest.mark.parametrize("data", [{1: 2}, [2 ** 64], [-(2 ** 63) - 1], "\ud800"])
def test_what_orjson_writes_otherwise_goes_to_json(data: Any) -> None:
    assert compact(data, _default) is None


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_deep_nesting_goes_to_json() -> None:
    assert compact(_deep(300), _default) is None
    assert json_for_script(_deep(300)) == _JSON(_deep(300))


def test_strings_numbers_and_containers_are_json_s_text() -> None:
    data = {"s": "".join(map(chr, range(0x250))) + "\u2028\u2029😀", "i": [0, -1, 2 ** 63 - 1, 2 ** 64 - 1],
            "f": [0.1, -0.0, 1e16, 1e22, 0.0001, 1.5e300], "t": (1, 2), "b": [True, False, None], "e": {}}
    assert compact(data, _default) == _JSON(data)


def test_dataclasses_and_dates_go_to_default_as_with_json() -> None:
    data = [_Point(1), datetime.date(2026, 1, 2), datetime.datetime(2026, 1, 2, 3, 4, 5)]
    assert compact(data, _default) == _JSON(data)


def test_nan_and_infinities_are_null_as_json_for_script_writes_them() -> None:
    data = {"a": float("nan"), "b": [float("inf"), -float("inf")], "c": 1.0}
    assert compact(data, _default) == '{"a":null,"b":[null,null],"c":1.0}'
    assert json_for_script(data) == '{"a":null,"b":[null,null],"c":1.0}'


def test_json_for_script_still_escapes_what_would_end_the_script() -> None:
    text = json_for_script({"x": "</script><!-- & \u2028 \u2029 >"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"x": "</script><!-- & \u2028 \u2029 >"}
