"""``benchmarks/predictor_recall.py``: the hit rule, the scoring of rankings per group, the variants' fit and the
GPU log parsing, on tiny synthetic groups whose answer is known (no processes, no testbed)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from _raw import write_raw

from autobyte.core import Config, KiB, MiB


@pytest.fixture(scope="module")
def pr(load_benchmark) -> ModuleType:
    return load_benchmark("predictor_recall")


def test_the_hit_rule_counts_a_configuration_within_tol_of_the_best_in_the_top_k(pr: ModuleType) -> None:
    speed = np.array([100.0, 99.5, 97.0, 80.0, 70.0])
    pred = np.array([1.0, 2.0, 3.0, 5.0, 4.0])  # ranks 3, 4, 2, 1, 0
    hits = pr.ranking_hits(pred, speed)
    assert hits["top1@1%"] == 0.0 and hits["top3@1%"] == 0.0  # the top 3 are 80, 70, 97: none within 1% of 100
    assert hits["top3@5%"] == 1.0 and hits["top1@5%"] == 0.0  # 97 is within 5% and third
    assert pr.ranking_hits(speed, speed) == {k: 1.0 for k in hits}  # the measured order itself hits everywhere
    # ties count as the expected hit of a random order among the tied: 2 good of 5, 3 drawn
    assert pr.expected_hit(np.zeros(5), np.array([1, 1, 0, 0, 0], bool), 3) == pytest.approx(1 - 1 / 10)
    assert pr.random_hits(speed)["top1@1%"] == pytest.approx(2 / 5)
    # a tie block straddling the cut after a miss: 1 slot left among 3 tied, 1 good
    assert pr.expected_hit(np.array([9.0, 5, 5, 5]), np.array([0, 0, 1, 0], bool), 2) == pytest.approx(1 / 3)


def _group(pr: ModuleType, speed: list[float], configs: list[Config], source: str = "syn", rep: int = 0) -> object:
    return pr.Group(source, 1000.0, rep, np.array([[c.partition_bytes, c.credit_bytes] for c in configs]),
                    np.array(speed, dtype=float), [None] * len(configs))


def test_evaluate_ranks_from_the_window_nearest_bytescheduler_default_and_explains_the_miss(pr: ModuleType) -> None:
    cfgs = [Config(64 * KiB, 64 * KiB), Config(1 * MiB, 4 * MiB), Config(4 * MiB, 16 * MiB), Config(16 * MiB, 16 * MiB)]
    g = _group(pr, [50.0, 100.0, 90.0, 99.5], cfgs)
    assert g.start_index() == 2  # <4 MiB, 4X>: ByteScheduler's default's neighbour
    asked = []

    def favours_small_partitions(group, window):  # a predictor that gets it wrong: smaller partition, faster
        asked.append(window)
        return 1.0 / group.configs[:, 0]

    res = pr.evaluate([g], favours_small_partitions, windows="start")
    assert asked == [2]
    assert res["overall"]["rankings"] == 1 and res["by_source"]["syn"]["groups"] == 1
    rec = res["overall"]["recall"]
    assert rec["top1@1%"] == 0.0 and rec["top3@1%"] == 1.0  # first 64 KiB (measured 0.5x), then 1 MiB (the best)
    f = res["failures"][0]
    assert f["first"] == "<64 KiB, 1X>" and f["best"] == "<1 MiB, 4X>" and f["first_measured_vs_best"] == 0.5
    b = pr.breakdown(res["failures"])
    assert b["first_credit_x"] == {"1X": 1} and b["top3_misses"] == 0
    res = pr.evaluate([g], favours_small_partitions, windows="each")
    assert res["overall"]["rankings"] == 4


def test_references_random_and_replicate(pr: ModuleType) -> None:
    cfgs = [Config(1 * MiB, 1 * MiB), Config(2 * MiB, 4 * MiB), Config(4 * MiB, 16 * MiB)]
    a = _group(pr, [100.0, 80.0, 60.0], cfgs, rep=0)
    b = _group(pr, [60.0, 80.0, 100.0], cfgs, rep=1)  # the other repetition ranks them the other way round
    rep = pr.evaluate_reference([a, b], "replicate")
    assert rep["overall"]["recall"]["top1@1%"] == 0.0 and rep["overall"]["recall"]["top3@1%"] == 1.0
    rnd = pr.evaluate_reference([a, b], "random")
    assert rnd["overall"]["recall"]["top1@1%"] == pytest.approx(1 / 3)


def test_the_trend_fitted_on_measured_windows_finds_the_credit_that_wins(pr: ModuleType) -> None:
    # one partition, credit 1X..16X: speed rises with the credit multiple (log-linear), so the best is 16X
    cfgs = [Config(1 * MiB, m * MiB) for m in (1, 2, 3, 4, 6, 8, 12, 16)]
    speed = [100.0 * m ** 0.2 for m in (1, 2, 3, 4, 6, 8, 12, 16)]
    g = _group(pr, speed, cfgs)
    ranker = pr.ResidualRanker(None, use_network=False)
    for seen in pr.seen_windows(g, 3, 4):
        assert seen[0] == g.start_index() and len(set(seen)) == 3
        pred = ranker(g, seen)
        assert int(np.argmax(pred)) == 7  # <1 MiB, 16X>
    assert pr.seen_windows(g, 3, 4) == pr.seen_windows(g, 3, 4)  # seeded: every variant sees the same windows


def test_gpu_log_trials_and_their_outcomes(pr: ModuleType, tmp_path: Path) -> None:
    md = tmp_path / "bench_gpu.md"
    md.write_text(
        "| engine <4 MB, 4X> (ByteScheduler's default) | 1300.0 | 150 | 1x |\n"
        "| engine <16 MiB, 2X> **(best of grid)** | 1500.0 | 130 | 1x |\n\n"
        "**autobyte** per chunk of 12 iterations vs DDP: 1.0\n"
        "- iteration 12: explore: <partition 8 MiB, credit 1X> predicted 1450.0 samples/s (best measured 1400.0, error 10%)\n"
        "- iteration 24: rollback: <partition 3.8147 MiB, credit 4X> measured 1400.0 samples/s in these conditions, "
        "<partition 8 MiB, credit 1X> 1260.0 (+11.1%)\n"
        "- iteration 76: explore: <partition 2 MiB, credit 6X> predicted 1442.0 samples/s (best measured 1400.0, error 9%)\n",
        encoding="utf-8")
    files = pr.gpu_report([str(md)])
    assert files[0]["static_ranking"][0].startswith("<16 MiB, 2X>")
    t = files[0]["tuner_runs"][0]["trials"]
    assert [x["config"] for x in t] == ["<8 MiB, 1X>", "<2 MiB, 6X>"]
    assert t[0]["outcome"] == "rolled back" and t[0]["measured_gain"] == pytest.approx(-0.1)
    assert t[1]["outcome"].startswith("kept") and t[1]["measured_gain"] is None
    s = pr.gpu_summary(files)
    assert s["first_trial_configs"] == {"<8 MiB, 1X>": 1} and s["trials_credit_1x"] == 1


def test_the_shipped_network_ranks_a_simulated_raw_folder(pr: ModuleType, load_benchmark, tmp_path: Path) -> None:
    collect = load_benchmark("collect")
    cfgs = [Config(256 * KiB, 512 * KiB), Config(4 * MiB, 8 * MiB), Config(16 * MiB, 16 * MiB)]
    raw = write_raw(tmp_path / "raw", collect, rates=(2000.0,), reps=1, configs=cfgs, iters=3)
    groups = pr.load_groups(str(raw), "sim")
    assert len(groups) == 1 and len(groups[0].speed) == 3
    from autobyte.meta import MetaNetwork

    net = MetaNetwork.load_default()
    res = pr.evaluate(groups, pr.ScorerRanker(net), windows="each")
    assert res["overall"]["rankings"] == 3
    assert all(0.0 <= v <= 1.0 for v in res["overall"]["recall"].values())
    assert res["overall"]["recall"]["top3@1%"] == 1.0  # 3 configurations: the top 3 is all of them
    before = pr.ScorerRanker(net)(groups[0], 0)
    assert pr.AdaptedRanker(net, time_budget_s=0.2)(groups[0], [0, 1]).shape == (3,)
    assert np.allclose(pr.ScorerRanker(net)(groups[0], 0), before)  # the head is reset after the variant ranked
