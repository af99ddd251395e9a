from __future__ import annotations

import math

import numpy as np
import pytest

from autobyte.core import KiB, MAX_BYTES, MiB, Config, SearchSpace, check_bytes


@pytest.mark.parametrize("value", [1, 4096, np.int64(7), MAX_BYTES])
def test_check_bytes_accepts(value):
    assert check_bytes("partition_bytes", value) == int(value)


@pytest.mark.parametrize(
    "value, exc, match",
    [
        (0, ValueError, r"partition_bytes must be a positive integer, but got partition_bytes=0\."),
        (-1, ValueError, "partition_bytes=-1"),
        (2.0, TypeError, r"partition_bytes=2\.0 \(a float\)"),
        (math.nan, TypeError, "partition_bytes=nan"),
        (math.inf, TypeError, "partition_bytes=inf"),
        (True, TypeError, "partition_bytes=True"),
        ("1MB", TypeError, "partition_bytes='1MB'"),
        (MAX_BYTES + 1, ValueError, "at most"),
    ],
)
def test_check_bytes_rejects(value, exc, match):
    with pytest.raises(exc, match=match):
        check_bytes("partition_bytes", value)


def test_config_from_multiple_and_str():
    c = Config.from_multiple(1 * MiB, 4)
    assert c == Config(MiB, 4 * MiB)
    assert c.credit_multiple == 4
    assert str(c) == "<partition 1 MiB, credit 4X>"
    with pytest.raises(ValueError, match="credit_multiple must be a positive finite number"):
        Config.from_multiple(MiB, 0)
    with pytest.raises(ValueError, match="credit_bytes must be a positive integer"):
        Config(MiB, 0)


def test_default_space_spans_paper_ranges():
    s = SearchSpace.default()
    arr = s.to_array()
    assert arr[:, 0].min() == 4 * KiB and arr[:, 0].max() == 1024 * MiB
    assert set(np.round(arr[:, 1] / arr[:, 0], 6)) == {1, 2, 3, 4, 6, 8, 12, 16}
    assert len(s) == 19 * 8


def test_paper_grid_search_steps():
    s = SearchSpace.paper_grid_search(max_partition_bytes=8 * MiB, max_credit_multiple=3)
    parts = sorted({c.partition_bytes for c in s})
    assert parts == [1 * MiB, 2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB]
    assert {c.credit_multiple for c in s} == {1, 2, 3}


def test_space_errors_and_lookup():
    with pytest.raises(ValueError, match="at least one Config"):
        SearchSpace([])
    with pytest.raises(ValueError, match="duplicates"):
        SearchSpace([Config(1, 1), Config(1, 1)])
    with pytest.raises(TypeError, match="Config objects"):
        SearchSpace([(1, 1)])  # type: ignore[list-item]
    s = SearchSpace([Config(MiB, MiB), Config(4 * MiB, 8 * MiB)])
    assert s.index(Config(4 * MiB, 8 * MiB)) == 1
    with pytest.raises(ValueError, match="not in this search space"):
        s.index(Config(2, 2))
    assert s.nearest(Config(3 * MiB, 7 * MiB)) == Config(4 * MiB, 8 * MiB)
    one = SearchSpace([Config(MiB, MiB)])
    assert len(one) == 1 and one.nearest(Config(1, 1)) == Config(MiB, MiB)


def test_config_wire_defaults_to_fp32_and_changes_nothing_there():
    c = Config(MiB, 4 * MiB)
    assert c.wire == "fp32" and c == Config(MiB, 4 * MiB, "fp32")
    # hashing, printing and serialising are those of the two-field configuration
    assert hash(c) == hash((MiB, 4 * MiB))
    assert str(c) == "<partition 1 MiB, credit 4X>" and repr(c) == f"Config(partition_bytes={MiB}, credit_bytes={4 * MiB})"
    assert c.to_dict() == {"partition_bytes": MiB, "credit_bytes": 4 * MiB}
    assert Config.from_dict(c.to_dict()) == c == Config(**c.to_dict())
    assert sorted([Config(2, 1), Config(1, 2), Config(1, 1)]) == [Config(1, 1), Config(1, 2), Config(2, 1)]
    assert SearchSpace.default().to_array().shape[1] == 2


@pytest.mark.parametrize("wire", ["bf16", "fp16"])
def test_config_16_bit_wire_is_another_configuration(wire):
    c = Config(MiB, 4 * MiB, wire)
    assert c != Config(MiB, 4 * MiB) and len({c, Config(MiB, 4 * MiB)}) == 2
    assert str(c) == f"<partition 1 MiB, credit 4X, {wire}>"
    assert repr(c) == f"Config(partition_bytes={MiB}, credit_bytes={4 * MiB}, wire={wire!r})"
    assert c.to_dict() == {"partition_bytes": MiB, "credit_bytes": 4 * MiB, "wire": wire}
    assert Config.from_dict(c.to_dict()) == c and Config.from_multiple(MiB, 4, wire) == c
    assert Config.from_dict({"partition_bytes": MiB, "credit_bytes": 4 * MiB}).wire == "fp32"  # an older record


@pytest.mark.parametrize("wire, exc", [("fp8", ValueError), ("BF16", ValueError), ("", ValueError), (16, TypeError),
                                       (None, TypeError)])
def test_config_refuses_a_bad_wire_in_one_line(wire, exc):
    with pytest.raises(exc, match=r"^wire must be one of 'fp32', 'bf16', 'fp16', but got wire=") as info:
        Config(MiB, MiB, wire)
    assert repr(wire) in str(info.value) and "\n" not in str(info.value)
