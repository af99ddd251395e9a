"""Bandwidth traces: constructors, the --trace/--flow syntax, validation (no root needed)."""

from __future__ import annotations

import json
import math

import pytest

from autobyte.testbed import BandwidthTrace, CompetingFlow, RateChange, parse_flow


def test_step_cycles_rates_every_k_iterations() -> None:
    t = BandwidthTrace.step([100, (1000, 200)], every=20, unit="it", n_phases=4)
    assert [(c.at, c.up_mbit, c.down_mbit) for c in t.changes] == [
        (0, 100.0, 100.0), (20, 1000.0, 200.0), (40, 100.0, 100.0), (60, 1000.0, 200.0)
    ]
    assert t.iteration_boundaries() == [20, 40, 60]


def test_parse_step_seconds_and_asymmetric() -> None:
    t = BandwidthTrace.parse("step:100/20,500@1.5s,n=3")
    assert [(c.at, c.unit, c.up_mbit, c.down_mbit) for c in t.changes] == [
        (0.0, "s", 100.0, 20.0), (1.5, "s", 500.0, 500.0), (3.0, "s", 100.0, 20.0)
    ]
    assert t.iteration_boundaries() == []


def test_parse_const_and_walk() -> None:
    assert BandwidthTrace.parse("const:300/30").changes == (RateChange(0, 300, 30),)
    w = BandwidthTrace.parse("walk:50-800@5it,seed=3,n=200")
    rates = [c.up_mbit for c in w.changes]
    assert len(rates) == 200 and all(50 <= r <= 800 for r in rates)
    assert len(set(rates)) > 100  # it moves
    assert rates == [c.up_mbit for c in BandwidthTrace.random_walk(50, 800, every=5, seed=3, n_phases=200).changes]
    assert rates != [c.up_mbit for c in BandwidthTrace.random_walk(50, 800, every=5, seed=4, n_phases=200).changes]


def test_json_round_trip(tmp_path) -> None:
    t = BandwidthTrace(
        (RateChange(0, 100), RateChange(10, 50, 25, ranks=(1,)), RateChange(2.5, 400, unit="s")),
        (CompetingFlow(5, 2.0, 1, 0, unit="it"),),
    )
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t.to_dict()))
    assert BandwidthTrace.parse(str(path)) == t
    assert t.iteration_boundaries() == [5, 10]


@pytest.mark.parametrize("value", [0, -5, math.nan, math.inf, 2e6])
def test_rate_rejects_non_positive_or_absurd(value: float) -> None:
    with pytest.raises(ValueError, match=r"up_mbit must be (a positive number|at most).*up_mbit="):
        RateChange(0, value)


def test_rate_rejects_non_number() -> None:
    with pytest.raises(TypeError, match=r"down_mbit must be a positive number of Mbit/s, but got down_mbit='fast'"):
        RateChange(0, 10, "fast")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec, match",
    [
        ("step:100,0@20it", r"bad trace 'step:100,0@20it'.*up_mbit must be a positive number.*up_mbit=0.0"),
        ("step:100,-3@20it", r"up_mbit=-3.0"),
        ("step:100,1000", r"missing '@K\(it\|s\)'"),
        ("step:100,1000@20min", r"expected the period as K followed by 'it' or 's'"),
        ("step:100@2.5it", r"every must be a whole number of iterations"),
        ("step:100@0s", r"every must be a positive number, but got every=0"),
        ("step:fast@1s", r"expected a rate in Mbit/s"),
        ("step:100@1s,bogus=1", r"unknown option 'bogus=1'"),
        ("walk:500-50@1s", r"high_mbit must be above low_mbit"),
        ("sine:1", r"trace must be a .json file or start with 'const:', 'step:' or 'walk:', but got trace='sine:1'"),
        ("", r"trace must be a non-empty string"),
    ],
)
def test_parse_rejects_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BandwidthTrace.parse(spec)


def test_trace_must_start_at_zero_for_all_ranks(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"first rate change of a trace must be at 0 for every rank.*at=5"):
        BandwidthTrace((RateChange(5, 100),))
    with pytest.raises(ValueError, match=r"ranks=\(1,\)"):
        BandwidthTrace((RateChange(0, 100, ranks=(1,)),))
    with pytest.raises(ValueError, match=r"needs at least one rate change"):
        BandwidthTrace(())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"is not valid JSON"):
        BandwidthTrace.parse(str(bad))
    bad.write_text(json.dumps({"changes": [{"at": 0, "up_mbit": 10, "speed": 3}]}))
    with pytest.raises(ValueError, match=r"unknown keys \['speed'\]"):
        BandwidthTrace.parse(str(bad))
    bad.write_text(json.dumps({"changes": [{"at": 0, "up_mbit": 10}], "flows": [{"at": 1, "duration_s": 1, "src": 0, "dst": 0}]}))
    with pytest.raises(ValueError, match=r"src and dst must be different ranks, but got src=0, dst=0"):
        BandwidthTrace.parse(str(bad))
    with pytest.raises(ValueError, match=r"RateChange.at must be a whole iteration number"):
        RateChange(1.5, 10)
    with pytest.raises(ValueError, match=r"RateChange.unit must be one of"):
        RateChange(1, 10, unit="ms")


def test_check_ranks_names_the_rank() -> None:
    t = BandwidthTrace((RateChange(0, 10), RateChange(3, 20, ranks=(4,))))
    with pytest.raises(ValueError, match=r"names rank 4, but there are only 2 workers"):
        t.check_ranks(2)


def test_parse_flow() -> None:
    assert parse_flow("at=40it,src=1,dst=0,s=5") == CompetingFlow(40, 5.0, 1, 0, unit="it")
    assert parse_flow("at=2.5s,src=0,dst=1,s=1.5") == CompetingFlow(2.5, 1.5, 0, 1, unit="s")
    with pytest.raises(ValueError, match=r"flow must look like at=AT\(it\|s\),src=RANK,dst=RANK,s=SECONDS.*flow='40it:1>0:5s'"):
        parse_flow("40it:1>0:5s")
    with pytest.raises(ValueError, match=r"duration_s must be a number of seconds in \(0, 3600\], but got duration_s=0.0"):
        parse_flow("at=1s,src=0,dst=1,s=0")
    with pytest.raises(ValueError, match=r"src must be a rank >= 0"):
        CompetingFlow(1, 1, -1, 0)
