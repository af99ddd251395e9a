"""Bad inputs of ``autobyte bench`` / ``autobyte demo`` plans, and the summary maths."""

from __future__ import annotations

import pytest

from autobyte.bench._real import BenchPlan, IterationRow, read_iterations, summarize, write_outputs
from autobyte.bench.demo import DemoPlan
from autobyte.core import Config


@pytest.mark.parametrize("cls", [BenchPlan, DemoPlan])
@pytest.mark.parametrize(
    "kw, match",
    [
        ({"low_mbit": 0}, "low_mbit must be a positive number of Mbit/s, but got low_mbit=0"),
        ({"high_mbit": float("nan")}, "high_mbit must be a positive number"),
        ({"low_mbit": 500.0, "high_mbit": 400.0}, "high_mbit must be above low_mbit"),
        ({"iters": 0}, "iters must be a positive integer, but got iters=0"),
        ({"every": 2.5}, "every must be a positive integer"),
    ],
)
def test_plans_reject_bad_arguments(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cls(**kw)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"rounds": 0}, "rounds must be a positive integer, but got rounds=0"),
        ({"rounds": True}, "rounds must be a positive integer, but got rounds=True"),
        ({"tuner": "fastest"}, "tuner must be one of .*, but got tuner='fastest'"),
    ],
)
def test_demo_plan_rejects_bad_rounds_and_tuner(kw, match):
    with pytest.raises(ValueError, match=match):
        DemoPlan(**kw)


@pytest.mark.parametrize(
    "methods, match",
    [
        (("ddp", "magic"), r"methods must be a non-empty subset of \('ddp', 'bytescheduler', 'autobyte', 'ddp_hook', "
                           r"'autobyte_wire'\), but got methods=\('ddp', 'magic'\)"),
        ((), "methods must be a non-empty subset"),
        ("ddp", "methods must be a non-empty subset of .*, but got methods='ddp'"),
        (("autobyte_wire", "ddp_hook"), r"methods must include 'ddp' \(every speed-up is over plain DDP in the same round\), "
                                        r"but got methods=\('autobyte_wire', 'ddp_hook'\)"),
    ],
)
def test_demo_plan_rejects_bad_methods(methods, match):
    with pytest.raises(ValueError, match=match):
        DemoPlan(methods=methods)


def test_demo_plan_runs_all_methods_by_default_in_table_order():
    from autobyte.bench.demo import METHOD_NAMES

    assert DemoPlan().methods == METHOD_NAMES == ("ddp", "bytescheduler", "autobyte", "ddp_hook", "autobyte_wire")
    # a subset runs in the tables' order, whatever the order given; a repeat runs once
    assert DemoPlan(methods=["autobyte_wire", "ddp", "ddp_hook", "ddp"]).methods == ("ddp", "ddp_hook", "autobyte_wire")


def test_demo_plan_accepts_every_tuner_name():
    from autobyte.core.tuners import tuner_names

    for name in tuner_names():
        assert DemoPlan(tuner=name, rounds=1).tuner == name


def test_bench_methods_must_be_known():
    with pytest.raises(ValueError, match="methods must be a non-empty subset"):
        BenchPlan(methods=["ddp", "magic"])
    with pytest.raises(ValueError, match="methods must be a non-empty subset"):
        BenchPlan(methods=[])


def test_trace_starts_high_and_summary_ratios():
    plan = BenchPlan(low_mbit=100, high_mbit=1000, every=2, iters=4, batch_size=16)
    assert [plan.rate_at(i) for i in range(4)] == [1000, 1000, 100, 100]
    assert plan.trace_spec() == "step:1000,100@2it,n=2"
    fast = [{"iteration": i, "seconds": 0.1} for i in range(4)]
    slow = [{"iteration": i, "seconds": 0.2} for i in range(4)]
    s = summarize(plan, {"bo": slow, "autobyte": fast})
    assert s["throughput"]["bo"]["all"] == pytest.approx(32 / 0.2)
    assert s["vs_bo"]["autobyte"]["all"] == pytest.approx(2.0)
    assert s["vs_bo"]["autobyte"]["low"] == pytest.approx(2.0)


def test_iterations_csv_reads_back_what_the_bench_wrote(tmp_path):
    plan = BenchPlan(low_mbit=100, high_mbit=1000, every=2, iters=4, batch_size=16)
    runs = {"ddp": [{"iteration": i, "seconds": 0.1, "samples_per_s": 320.0} for i in range(4)],
            "autobyte": [{"iteration": i, "seconds": s, "samples_per_s": 32 / s, "config": c}
                         for i, (s, c) in enumerate([(0.1, [4, 16]), (0.2, [1, 4]), (0.1, [4, 16]), (0.25, [4, 16])])]}
    write_outputs(plan, runs, {}, summarize(plan, runs), str(tmp_path))
    got = read_iterations(tmp_path)  # the --out folder, as write_outputs leaves it, or the file itself
    assert got == read_iterations(tmp_path / "iterations.csv")
    assert sorted(got) == ["autobyte", "ddp"]
    first = got["autobyte"]
    assert [r.iteration for r in first] == [0, 1, 2, 3] and [r.seconds for r in first] == [0.1, 0.2, 0.1, 0.25]
    assert first[1] == IterationRow("autobyte", 1, 1000.0, 0.2, 160.0, Config(1, 4))
    assert [r.rate_mbit for r in first] == [1000.0, 1000.0, 100.0, 100.0]  # from the plan's trace
    assert all(r.config is None for r in got["ddp"])  # the unscheduled baseline has no scheduler configuration


def test_iterations_csv_that_is_not_a_benchs_is_refused_with_the_file_and_line(tmp_path):
    bad = tmp_path / "iterations.csv"
    bad.write_text("method,repeat,iteration,condition,seconds\nddp,0,0,2000mbit,0.1\n")  # a suite's columns
    with pytest.raises(ValueError, match=r"iterations.csv: not a bench's iterations.csv: columns \['rate_mbit', 'samples_per_s'"):
        read_iterations(bad)
    bad.write_text("method,iteration,rate_mbit,seconds,samples_per_s,partition_bytes,credit_bytes\n"
                   "ddp,0,1000,0.1,320,26214400,\nautobyte,0,1000,0.1,320,4,many\n")
    with pytest.raises(ValueError, match=r"iterations.csv, line 3: invalid literal for int\(\) with base 10: 'many'"):
        read_iterations(bad)
    with pytest.raises(FileNotFoundError):
        read_iterations(tmp_path / "nowhere")


def test_bench_plan_with_equal_rates_is_a_constant_trace():
    plan = BenchPlan(low_mbit=2500, high_mbit=2500, every=6, iters=6, batch_size=8)
    assert plan.trace_spec() == "const:2500"
    assert {plan.rate_at(i) for i in range(6)} == {2500}
    s = summarize(plan, {"ddp": [{"iteration": i, "seconds": 0.5} for i in range(6)]})
    assert s["throughput"]["ddp"]["all"] == pytest.approx(16 / 0.5) == s["throughput"]["ddp"]["high"]
    with pytest.raises(ValueError, match=r"high_mbit must be above low_mbit or equal to it \(a constant trace\), but got low_mbit=300"):
        BenchPlan(low_mbit=300, high_mbit=200)
    with pytest.raises(ValueError, match="high_mbit must be above low_mbit, but got"):
        DemoPlan(low_mbit=300, high_mbit=300)  # the demo's trace alternates: equal rates stay an error there


def test_decision_row_keeps_what_a_window_outcome_says():
    from autobyte.bench._rank_plan import decision_row
    from autobyte.core import Config
    from autobyte.core.window import DecisionRecord, WindowOutcome

    a, b = Config(1 << 20, 4 << 20), Config(4 << 20, 16 << 20)
    quiet = WindowOutcome(9, True, True, None, a, 9, speed=120.0)
    assert decision_row(quiet) == {"iteration": 9, "config": [a.partition_bytes, a.credit_bytes], "observed_speed": 120.0}
    moved = WindowOutcome(19, True, True, DecisionRecord(20, a, b, "explore", 150.0, 60.0), b, 20, speed=60.0, regime_changed=True)
    assert decision_row(moved) == {"iteration": 19, "config": [b.partition_bytes, b.credit_bytes], "reason": "explore",
                                   "predicted_speed": 150.0, "observed_speed": 60.0, "regime_changed": True}
    # on rank 0 the controller's history entry holds the whole reason; the decision message only its first bytes
    long = "explore: " + "x" * 200
    entry = {"iteration": 19, "new_config": b.to_dict(), "reason": long}
    cut = WindowOutcome(19, True, True, DecisionRecord(20, a, b, long[:96], 150.0, 60.0), b, 20, speed=60.0, entry=entry)
    assert decision_row(cut)["reason"] == long
    other = dict(entry, new_config=a.to_dict())  # an entry about another move: not this decision's reason
    assert decision_row(WindowOutcome(19, True, True, DecisionRecord(20, a, b, "short", 1.0, 1.0), b, 20, entry=other))["reason"] == "short"
    # the rule of the detector that saw a change travels from the history entry to the row
    seen = WindowOutcome(24, True, True, None, b, 24, speed=30.0, regime_changed=True,
                         entry={"iteration": 24, "regime_changed": True, "regime_rule": "rate"})
    assert decision_row(seen)["regime_rule"] == "rate" and "regime_rule" not in decision_row(moved)
    told = WindowOutcome(24, True, True, None, b, 24, speed=30.0, regime_changed=True,
                         entry={"iteration": 24, "regime_changed": True, "regime_rule": "speed", "mixed": True})
    assert decision_row(told)["mixed"] is True and "mixed" not in decision_row(seen)


def test_keep_log_writes_rank_zeros_autobyte_records_at_info_to_its_run_folder(tmp_path):
    import logging

    from autobyte.bench._rank_plan import LOG_FILE, keep_log

    assert keep_log(str(tmp_path / "r1"), 1) is None and not (tmp_path / "r1").exists()  # other ranks: nothing
    logger = logging.getLogger("autobyte")
    level, before = logger.level, list(logger.handlers)
    handler = keep_log(str(tmp_path / "r0"), 0)
    try:
        assert handler is not None
        assert not (tmp_path / "r0" / LOG_FILE).exists()  # created at the first record only
        logging.getLogger("autobyte.meta").debug("autobyte: a debug line")
        logging.getLogger("autobyte.meta").info("autobyte: window 3, <a> -> <b>: explore")
        logging.getLogger("autobyte.tuners").warning("a warning")
        logging.getLogger("elsewhere").info("not ours")
        handler.flush()
        lines = (tmp_path / "r0" / LOG_FILE).read_text().splitlines()
    finally:
        for h in [h for h in logger.handlers if h not in before]:
            logger.removeHandler(h)
            h.close()
        logger.setLevel(level)
    assert len(lines) == 2, lines
    assert lines[0].endswith("autobyte.meta INFO autobyte: window 3, <a> -> <b>: explore")
    assert lines[1].endswith("autobyte.tuners WARNING a warning")


def test_keep_log_leaves_warnings_on_stderr_in_a_process_without_handlers(tmp_path):
    import subprocess
    import sys

    from autobyte.bench._rank_plan import LOG_FILE

    code = ("import logging\nfrom autobyte.bench._rank_plan import keep_log\nkeep_log(r'%s', 0)\n"
            "logging.getLogger('autobyte.core').warning('a warning')\n"
            "logging.getLogger('autobyte.meta').info('an info')\n") % tmp_path
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "a warning"  # as logging.lastResort prints it without the handler; INFO not
    text = (tmp_path / LOG_FILE).read_text()
    assert "WARNING a warning" in text and "INFO an info" in text


@pytest.mark.integration
def test_an_all_reduce_tuner_run_keeps_the_tuners_reasons_in_its_folder(tmp_path):
    """Two real gloo ranks of ``allreduce_ranks`` under the shipped tuner: rank 0's ``tuner.log`` holds its decisions."""
    import json

    from autobyte.testing import run_ranks

    # started at 256 KiB partitions, credit 1X, far below the CNN's best, so its first windows pay for a trial; on a
    # loaded host (a CI run) its detector may instead read the noise as changes of conditions and hold still
    spec = {"method": "tuner", "tuner": "autobyte", "config": [256 << 10, 256 << 10], "iters": 40, "window_iters": 4,
            "model": "cnn", "batch_size": 4}
    results = run_ranks(["-m", "autobyte.bench.allreduce_ranks", json.dumps(spec), str(tmp_path)],
                        env={"OMP_NUM_THREADS": "1"}, timeout_s=300)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    moves = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    moves = [d for d in moves if "reason" in d]
    lines = (tmp_path / "tuner.log").read_text().splitlines()
    held = [line for line in lines if "autobyte.meta INFO autobyte: conditions changed" in line]
    assert moves or held, ("the tuner neither moved nor logged why it held in 40 iterations", lines)
    # every move decisions.jsonl records has its reason's kind among the log's decisions (only rank 0 writes the file)
    logged = [line for line in lines if "autobyte.meta INFO autobyte: window " in line]
    assert len(logged) >= len(moves), (lines, moves)
    assert all(d["reason"].split(":")[0] in "\n".join(logged) for d in moves)
