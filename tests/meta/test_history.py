"""JobHistory: past jobs' measurements in a folder, and the start they pick."""

from __future__ import annotations

import json
import math
import stat

import pytest

from autobyte.core.space import Config, MiB, SearchSpace
from autobyte.meta._history import HistoryPlan, JobHistory
from autobyte.meta._ledger import Regime

SPACE = SearchSpace.grid([MiB, 4 * MiB, 16 * MiB], [1, 2, 4])
DEFAULT = Config(4_000_000, 16_000_000)  # ByteScheduler's default: outside the grid
A, B, C = Config(MiB, 4 * MiB), Config(4 * MiB, 8 * MiB), Config(16 * MiB, 16 * MiB)


def regimes(effects: dict[Config, float], levels: list[float], windows: float = 3.0) -> list[list[tuple[Config, float, float]]]:
    """Every configuration of ``effects`` measured in every regime at ``level * exp(effect)``."""
    return [[(c, lv * math.exp(e), windows) for c, e in effects.items()] for lv in levels]


def test_effects_recover_a_multiplicative_landscape():
    true = {DEFAULT: 0.0, A: 0.08, B: -0.05, C: 0.02}
    eff = JobHistory("unused", prior=1e-9).effects(regimes(true, [50.0, 120.0, 300.0]), DEFAULT, SPACE)
    assert set(eff) == {A, B, C}
    for c in (A, B, C):
        assert eff[c][0] == pytest.approx(true[c], abs=1e-6)
        assert eff[c][1] == 3


def test_effects_are_relative_to_the_given_configuration():
    true = {DEFAULT: 0.0, A: 0.08, B: -0.05}
    eff = JobHistory("unused", prior=1e-9).effects(regimes(true, [50.0, 120.0]), A, SPACE)
    assert eff[B][0] == pytest.approx(-0.13, abs=1e-6)
    assert DEFAULT not in eff  # outside the space: only the given configuration is kept from outside it


@pytest.mark.parametrize("windows, prior", [(3.0, 1.0), (1.0, 1.0), (3.0, 0.5)])
def test_prior_shrinks_one_regime_by_its_closed_form(windows, prior):
    # two configurations in one regime, each ``windows`` windows: the fit's effect is d * w / (w + 2 * prior)
    d = math.log(1.10)
    eff = JobHistory("unused", prior=prior).effects([[(DEFAULT, 100.0, windows), (A, 110.0, windows)]], DEFAULT, SPACE)
    assert eff[A][0] == pytest.approx(d * windows / (windows + 2 * prior), rel=1e-9)


def test_regimes_of_one_configuration_compare_nothing():
    assert JobHistory("unused").effects([[(A, 100.0, 3.0)], [(DEFAULT, 90.0, 3.0)]], DEFAULT, SPACE) == {}


def _write(folder, job, rows_per_regime):
    JobHistory(folder).save(job, [Regime(i, {c: [s, w, 1.0] for c, s, w in rows}) for i, rows in enumerate(rows_per_regime)])


def test_pick_moves_to_the_fastest_compared_in_enough_regimes(tmp_path):
    _write(tmp_path, "one", regimes({DEFAULT: 0.0, A: 0.10, B: 0.04}, [80.0, 200.0]))
    _write(tmp_path, "two", regimes({DEFAULT: 0.0, A: 0.12}, [150.0]))
    cfg, why = JobHistory(tmp_path).pick(SPACE, DEFAULT)
    assert cfg == A
    assert "over the 3 regimes" in why and "starting there" in why


def test_pick_stays_under_min_gain_or_with_too_few_regimes(tmp_path):
    _write(tmp_path, "one", regimes({DEFAULT: 0.0, A: 0.03}, [80.0, 200.0]))
    cfg, why = JobHistory(tmp_path, min_gain=0.05).pick(SPACE, DEFAULT)
    assert cfg == DEFAULT and "under 5%" in why
    assert JobHistory(tmp_path, min_gain=0.01).pick(SPACE, DEFAULT)[0] == A
    cfg, why = JobHistory(tmp_path, min_gain=0.01, min_regimes=3).pick(SPACE, DEFAULT)
    assert cfg == DEFAULT and "no configuration compared in 3+" in why


def test_pick_never_leaves_the_space(tmp_path):
    outside = Config(3 * MiB, 3 * MiB)
    _write(tmp_path, "one", regimes({DEFAULT: 0.0, outside: 0.30, B: 0.06}, [80.0, 200.0]))
    assert JobHistory(tmp_path).pick(SPACE, DEFAULT)[0] == B


def test_empty_or_missing_folder_starts_where_given(tmp_path):
    cfg, why = JobHistory(tmp_path / "none").pick(SPACE, DEFAULT)
    assert cfg == DEFAULT and "0 regimes" in why


def test_save_load_round_trip_and_exclude(tmp_path):
    r = Regime(0, {A: [100.0, 7.0, 3.0], B: [90.0, 1.5, 4.0]}, durations=[40, 25])
    h = JobHistory(tmp_path)
    h.save("me", [r, Regime(1)], memory=3)  # the empty regime is not kept
    saved = json.loads((tmp_path / "job-me.json").read_text())
    assert saved["version"] == 1 and saved["job"] == "me" and saved["regimes"][0]["iterations"] == 65
    assert sorted(h.load()[0]) == sorted([(A, 100.0, 3.0), (B, 90.0, 1.5)])  # windows capped at the ledger's memory
    assert h.load(exclude="me") == []
    assert stat.S_IMODE((tmp_path / "job-me.json").stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".job-*"))  # no temporary file left


def test_read_only_history_writes_nothing(tmp_path):
    JobHistory(tmp_path / "h", write=False).save("me", [Regime(0, {A: [100.0, 1.0, 1.0]})])
    assert not (tmp_path / "h").exists()


def test_bad_files_are_skipped_with_a_warning(tmp_path):
    _write(tmp_path, "good", regimes({DEFAULT: 0.0, A: 0.10}, [80.0, 200.0]))
    (tmp_path / "job-old.json").write_text(json.dumps({"version": 99, "regimes": []}))
    (tmp_path / "job-torn.json").write_text("{not json")
    # a good regime before a bad one: the file counts whole or not at all
    (tmp_path / "job-neg.json").write_text(json.dumps({"version": 1, "regimes": [
        {"measured": [[1, 2, 5.0, 1.0], [2, 4, 6.0, 1.0]]}, {"measured": [[1, 2, -5.0, 1.0]]}]}))
    with pytest.warns(UserWarning, match=r"skipping job history file") as rec:
        rows = JobHistory(tmp_path).load()
    assert len(rows) == 2
    assert {m for w in rec for m in ("version 99", "job-torn", "not a positive number") if m in str(w.message)} == {
        "version 99", "job-torn", "not a positive number"}


def test_a_save_that_fails_warns_and_training_goes_on(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.warns(UserWarning, match=r"cannot save the job history .* training goes on"):
        JobHistory(tmp_path / "file" / "sub").save("me", [Regime(0, {A: [100.0, 1.0, 1.0]})])


@pytest.mark.parametrize("kw, exc, match", [
    ({"folder": 5}, TypeError, r"history_dir must be a folder path .* got 5"),
    ({"folder": ""}, TypeError, r"history_dir must be a folder path"),
    ({"min_gain": -0.1}, ValueError, r"min_gain"),
    ({"prior": 0.0}, ValueError, r"prior"),
    ({"min_regimes": 0}, ValueError, r"min_regimes"),
    ({"max_jobs": 0}, ValueError, r"max_jobs"),
])
def test_bad_arguments(tmp_path, kw, exc, match):
    kw = {"folder": tmp_path, **kw}
    with pytest.raises(exc, match=match):
        JobHistory(**kw)


def test_exported_from_the_meta_package():
    import autobyte.meta

    assert autobyte.meta.JobHistory is JobHistory and "JobHistory" in autobyte.meta.__all__
    assert autobyte.meta.HistoryPlan is HistoryPlan and "HistoryPlan" in autobyte.meta.__all__


def test_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=r"history_dir must be a folder, but .* is a file"):
        JobHistory(tmp_path / "f")


def test_only_the_most_recent_jobs_are_read(tmp_path):
    import os

    for i, job in enumerate(["old", "mid", "new"]):
        _write(tmp_path, job, [[(DEFAULT, 100.0 + i, 1.0), (A, 110.0, 1.0)]])
        os.utime(tmp_path / f"job-{job}.json", (1000 + i, 1000 + i))
    h = JobHistory(tmp_path, max_jobs=2)
    assert sorted(r[0][1] for r in h.load()) == [101.0, 102.0]
    assert sorted(r[0][1] for r in h.load(exclude="new")) == [100.0, 101.0]  # one's own file does not count
    assert len(h.load(exclude="not-yet-saved")) == 2  # a job that has saved nothing yet reads max_jobs files too


def test_plan_rules_out_what_past_jobs_measured_slower_than_the_start(tmp_path):
    # A fastest (picked), B within min_gain of it, C 10% below it; DEFAULT (the given start) compared too
    _write(tmp_path, "one", regimes({DEFAULT: 0.0, A: 0.10, B: 0.09, C: 0.0}, [80.0, 200.0]))
    plan = JobHistory(tmp_path, prior=1e-9).plan(SPACE, DEFAULT)
    assert plan.start == A and "starting there" in plan.reason
    assert plan.slower == frozenset({C})  # DEFAULT is outside SPACE; B is within 2% of A
    # no pick: the given configuration is the reference, and what ran slower than it is ruled out
    plan = JobHistory(tmp_path, prior=1e-9, min_gain=0.5).plan(SPACE, B)
    assert plan.start == B and plan.slower == frozenset()  # nothing 50% slower
    plan = JobHistory(tmp_path, prior=1e-9).plan(SPACE, B)
    assert plan.start == B and plan.slower == frozenset({C})  # A beats B by under 2%: no move; C 9% below


def test_plan_rules_out_the_given_start_only_when_a_past_job_compared_it(tmp_path):
    start = Config(4 * MiB, 4 * MiB)  # in SPACE
    _write(tmp_path, "one", regimes({A: 0.10, B: 0.0}, [80.0, 200.0]))
    plan = JobHistory(tmp_path, prior=1e-9).plan(SPACE, start)
    assert start not in plan.slower  # never compared with anything: nothing is known against it
    assert B in plan.slower  # 10% below A
    _write(tmp_path, "two", regimes({start: 0.0, A: 0.10}, [80.0, 200.0]))
    plan = JobHistory(tmp_path, prior=1e-9).plan(SPACE, start)
    assert plan.start == A and start in plan.slower


def test_plan_of_an_empty_history_rules_out_nothing(tmp_path):
    plan = JobHistory(tmp_path / "none").plan(SPACE, DEFAULT)
    assert plan.start == DEFAULT and plan.slower == frozenset()
