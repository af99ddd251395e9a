"""AutoByte with one of its policies switched off, for A/B runs of ``bench_tuner_sim.py``.

``OMP_NUM_THREADS=1 python benchmarks/bench_tuner_sim.py --set tune --import tuner_variants
--tuners autobyte,autobyte-no-equivalence,autobyte-no-calibration,autobyte-neither --adapt-time-s 60``
(the script's folder is on ``sys.path``, so ``--import tuner_variants`` finds this file).

On real runs, beside AutoByte in one command (docs/benchmarks.md, 7.5):
``sudo autobyte bench --suite full --import benchmarks/tuner_variants.py --methods
bytescheduler,hindsight,autobyte,tuner:autobyte-stop22``. ``autobyte-stop22`` is the tuner as it was
on 2026-11-25 (no refiling, no tail, trials 3 powers of two away); the others switch one policy.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from autobyte.core.tuners import register_tuner
from autobyte.core.tuning import Tuner


def _variant(**fixed: Any) -> Callable[..., Tuner]:
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.meta import AutoByteTuner

        return AutoByteTuner(network, background=background, adapt_time_s=adapt_time_s, **fixed)

    return factory


def _with(factory: Callable[..., Tuner], **attributes: Any) -> Callable[..., Tuner]:
    """The tuner with attributes the controller reads set (``settle``, ``refuge``, ``rate_rise``).

    ``make`` keeps ``factory``'s signature (``functools.wraps``), so ``bench_tuner_sim.py`` passes it
    the inline adaptation and the shared network as to any variant (before stop 29 it did not)."""
    @functools.wraps(factory)
    def make(*args: Any, **kwargs: Any) -> Tuner:
        tuner = factory(*args, **kwargs)
        for name, value in attributes.items():
            setattr(tuner, name, value)
        return tuner

    return make


register_tuner("autobyte-no-equivalence", _variant(equivalent=False))
register_tuner("autobyte-no-calibration", _variant(calibrate=False))
register_tuner("autobyte-neither", _variant(equivalent=False, calibrate=False))
# measured on 2026-11-26 (docs/evaluation.md), each as it ran then: the tuner of 2026-11-25 plus one change
# before stop 29 the tuner heard of a change at the mixed check and read no link rate (settle=False, rate_rise=None)
_BEFORE29: dict[str, Any] = dict(settle=False, rate_rise=None, shrink=None)
_STOP22 = dict(refile=False, tail=False, max_distance=3.0, **_BEFORE29)
register_tuner("autobyte-stop22", _variant(**_STOP22))
register_tuner("autobyte-near", _variant(**_STOP22, near_best=0.10))
register_tuner("autobyte-gain", _variant(**_STOP22, min_predicted_gain=0.0))
register_tuner("autobyte-near-gain", _variant(**_STOP22, near_best=0.10, min_predicted_gain=0.0))
register_tuner("autobyte-near-gain-d2", _variant(**dict(_STOP22, max_distance=2.0), near_best=0.10, min_predicted_gain=0.0))
# with refiling, before tail existed
register_tuner("autobyte-d2", _variant(tail=False, max_distance=2.0))
register_tuner("autobyte-near-d2", _variant(tail=False, max_distance=2.0, near_best=0.10))
register_tuner("autobyte-near-d1", _variant(tail=False, max_distance=1.0, near_best=0.10))
# the tuner of today with one policy off
register_tuner("autobyte-no-refile", _variant(refile=False))
register_tuner("autobyte-no-tail", _variant(tail=False))
# 2026-11-26 (stop 24): the check that shows a change dropped and the tuner told at the next one (settle),
# and the tuner told at the mixed check (the default again since settling measured slower on the README's
# 20-iteration phases; docs/benchmarks.md 7.6 ran `autobyte` with settle on beside `autobyte-straddle`)
register_tuner("autobyte-settle", _variant(settle=True, rate_rise=None))
register_tuner("autobyte-straddle", _variant(**_BEFORE29))
# 2026-11-26 (stop 24): the explorer lowers predictions by how far below them this job's trials ran
register_tuner("autobyte-debias", _variant(debias=True))
# 2026-11-26 (stop 25): the head fine-tuned on the CNN's real windows (`autobyte collect --finetune
# docs/figures/calib_real/raw`, docs/calibration.md; tune side only: no row of the held-out scenarios' models)
CNN_FT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "figures", "meta_real", "cnn_ft.npz")
register_tuner("autobyte-cnnft", _variant(weights=CNN_FT))
# 2026-11-26 (stop 25): expected gains scaled by the share this job's trials realised (Payoff)
register_tuner("autobyte-payoff", _variant(payoff=True))
# the explorer's gains and costs in iterations' worth of time instead of log speed ratios (stop 25), alone and with Payoff
register_tuner("autobyte-time", _variant(time_units=True))
register_tuner("autobyte-time-payoff", _variant(time_units=True, payoff=True))
# a trip of the guard goes to the fastest configuration measured in these conditions when it beat the start (stop 25;
# stop 35 measured it again, docs/benchmarks.md 7.18, and left it off)
register_tuner("autobyte-refuge", _with(_variant(), refuge=True))
register_tuner("autobyte-time-refuge", _with(_variant(time_units=True), refuge=True))
# 2026-11-26 (stop 27): the simulator, built from the job's own windows, predicts instead of the meta-network
register_tuner("autobyte-sim", _variant(predictor="simulator"))
# stop 28: the same, its per-message cost fitted to the speeds measured in the current conditions
register_tuner("autobyte-simfit", _variant(predictor="simulator-fit"))


def _static_from(name: str, choose: Callable[[Any, Any], Any]) -> Callable[..., Tuner]:
    """A static configuration run as a tuner that starts at ``choose(space, initial)`` and never moves."""
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.core.space import Config, SearchSpace
        from autobyte.core.tuning import StaticTuner

        class StaticFrom(StaticTuner):
            def start(self, space: SearchSpace, initial: Config) -> Config:
                super().start(space, initial)
                return choose(space, initial)

        tuner = StaticFrom()
        tuner.name = name
        return tuner

    return factory


def _static_at(partition: int, credit: int) -> Callable[..., Tuner]:
    """A static configuration run as a tuner that starts there (``bench_gpu --tuners``: one continuous run of it)."""
    from autobyte.core.space import Config

    return _static_from(f"static-{partition >> 20}m-{credit // partition}x", lambda space, initial: Config(partition, credit))


# continuous static runs at the GPU machine's best of grid (docs/benchmarks.md 8.1), beside the tuner's own run
register_tuner("static-16m-2x", _static_at(16 << 20, 32 << 20))
register_tuner("static-8m-2x", _static_at(8 << 20, 16 << 20))


def _switch_to(partition: int, credit: int) -> Callable[..., Tuner]:
    """Starts at the default and moves once, at its first window, to one configuration: what a reconfiguration costs later on."""
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.core.space import Config
        from autobyte.core.tuning import Decision, Observation, StaticTuner

        class SwitchTo(StaticTuner):
            name = f"switch-{partition >> 20}m-{credit // partition}x"

            def __init__(self) -> None:
                self.moved = False

            def observe(self, obs: Observation) -> Decision | None:
                if self.moved:
                    return None
                self.moved = True
                return Decision(Config(partition, credit), "switch once, at the first window")

        return SwitchTo()

    return factory


# stop 28: does a configuration switched to run slower than the same one started with? (the GPU's trials measured low)
register_tuner("static-1m-4x", _static_at(1 << 20, 4 << 20))
register_tuner("switch-1m-4x", _switch_to(1 << 20, 4 << 20))
# stop 33: the same on the GPU machine, at its best of grid and at the trials that measured 5-12% low there (8.2; 8.4: they run that slow)
register_tuner("switch-16m-2x", _switch_to(16 << 20, 32 << 20))
register_tuner("static-8m-1x", _static_at(8 << 20, 8 << 20))
register_tuner("switch-8m-1x", _switch_to(8 << 20, 8 << 20))
register_tuner("static-16m-1x", _static_at(16 << 20, 16 << 20))
register_tuner("switch-16m-1x", _switch_to(16 << 20, 16 << 20))
# stop 28: a trial starts only when it can end before the conditions are expected to change (Explorer within_phase)
register_tuner("autobyte-within", _variant(within_phase=True, **_BEFORE29))
# stop 28: the detector also takes a rise of the achieved link rate by half (past what configurations of partitions as
# large achieved in this regime) as a faster link, whatever the configuration
register_tuner("autobyte-rate", _variant(settle=False, rate_rise=0.5))
# stop 29: the tuner before answer_at_check (a verify or recall window judged at its first check) and clean_check
# (a clean check of a measured configuration judges a held surprise as the predictor's), and each alone
register_tuner("autobyte-stop28", _variant(answer_at_check=False, clean_check=False, **_BEFORE29))
register_tuner("autobyte-answer", _variant(clean_check=False, **_BEFORE29))
register_tuner("autobyte-clean", _variant(answer_at_check=False, **_BEFORE29))
register_tuner("autobyte-stop28-rate", _variant(answer_at_check=False, clean_check=False, settle=False, rate_rise=0.5))
# stop 29: the check that shows a change is kept by no one (detector, guard, ledger: it mixes both regimes), but the
# tuner is told at once (settle="notify") and can probe for a past regime; alone and with the achieved-rate signal
register_tuner("autobyte-notify", _variant(settle="notify", rate_rise=None))
register_tuner("autobyte-notify-rate", _variant(settle="notify", rate_rise=0.5))  # with shrink since stop 31
# the tuner of stop 29 before rate_rise became its default (answers at a check, reads no link rate)
register_tuner("autobyte-stop29", _variant(**_BEFORE29))
# stop 31: trials valued by what this job's trials found: predicted gains shrunk to the scale of the improvements its
# trials realised (prior 10%, 5% or 3%, worth one trial), and only gains beyond the mover's min_gain counted
# (AutoByteTuner shrink). A first version shrank towards the spread of every measured configuration below the best
# of its regime (slow trials widened it, so it explored as much: 6.5 trials per run against 7 on the real cnn-step)
register_tuner("autobyte-shrink", _variant(shrink=0.10))
register_tuner("autobyte-noshrink", _variant(shrink=None))  # the tuner of stop 30 (shrink=0.05 the default since stop 31)
register_tuner("autobyte-shrink05", _variant(shrink=0.05))
register_tuner("autobyte-shrink03", _variant(shrink=0.03))
register_tuner("autobyte-notify-rate-shrink", _variant(settle="notify", rate_rise=0.5, shrink=0.10))
# stop 32: a job starts where past jobs on this cluster measured fastest (AutoByteTuner(history_dir=...)).
# The folder is $AUTOBYTE_HISTORY_DIR (absolute; the ranks run elsewhere); $AUTOBYTE_HISTORY_WRITE=0 reads
# it only (the held-out runs, judged on a history of the tuning scenarios they must not add to).
_HISTORY = os.environ.get("AUTOBYTE_HISTORY_DIR", os.path.abspath("runs/history"))
_HISTORY_WRITE = os.environ.get("AUTOBYTE_HISTORY_WRITE", "1") != "0"
register_tuner("autobyte-history", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE))
# stop 33: autobyte-history tries nothing past jobs measured slower than its start (history_veto, on since stop 33);
# the tuner of stop 32, which tried what the network predicted whatever the history said:
register_tuner("autobyte-history-noveto", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, history_veto=False))


def _shadow(**fixed: Any) -> Callable[..., Tuner]:
    """AutoByte doing all its work (scoring, adapting, history) but never acting: its cost at a fixed configuration.

    For measuring that cost only: its state goes on as if its decisions had been applied (it breaks
    :meth:`Tuner.check`'s rule that a check answered ``None`` leaves the state unchanged).
    """
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.core.tuning import Decision, Observation
        from autobyte.meta import AutoByteTuner

        class Shadow(AutoByteTuner):
            def observe(self, obs: Observation) -> Decision | None:
                super().observe(obs)
                return None

            def check(self, obs: Observation) -> Decision | None:
                super().check(obs)
                return None

        return Shadow(network, background=background, adapt_time_s=adapt_time_s, **fixed)

    return factory


# stop 33: at the same configuration as static-history, the history tuner ran 2-3% slower in some runs (cnn-straggler
# repeat 1 made no decision at all); its own cost, with and without online adaptation (a worker process since stop 34)
register_tuner("autobyte-history-shadow", _shadow(history_dir=_HISTORY, history_write=_HISTORY_WRITE))
register_tuner("autobyte-history-shadow-noadapt", _shadow(history_dir=_HISTORY, history_write=_HISTORY_WRITE, adapt=False))
# stop 34: adaptation runs in a worker process by default (adapt_process=True); the thread of stop 33, for comparison
register_tuner("autobyte-history-shadow-thread", _shadow(history_dir=_HISTORY, history_write=_HISTORY_WRITE, adapt_process=False))
register_tuner("autobyte-history-thread", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, adapt_process=False))
# stop 34: a check whose iteration times step by 50% inside it is a change inside it (step_change=0.5, default);
# the tuner of stop 33 (neither the step rule nor the adaptation worker):
register_tuner("autobyte-history-stop33", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, adapt_process=False,
                                                   step_change=None))
register_tuner("autobyte-history-nostep", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, step_change=None))
# stop 35: the refuge was every tuner's default while the README suite and the full suite of docs/benchmarks.md 7.18
# ran (commit 7f1bac9); these are the tuners with it off, i.e. of stop 34 and, since it is off again, as they ship
register_tuner("autobyte-stop34", _with(_variant(), refuge=False))
register_tuner("autobyte-history-stop34", _with(_variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE), refuge=False))
register_tuner("autobyte-history-refuge", _with(_variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE), refuge=True))
# stop 35: trials' gains shrunk to what the history's regimes measured beyond the start (history_spread)
register_tuner("autobyte-history-spread", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, history_spread=True))
# stop 36: a change seen on one check's speed is confirmed before a trial and withdrawn when the next measurement of
# the configuration that showed it does not confirm it (confirm=True). It was the default while the runs of
# docs/benchmarks.md 7.19 ran, beside these tuners without it (as they ship again: confirm is off by default):
register_tuner("autobyte-stop35", _variant(confirm=False))
register_tuner("autobyte-history-stop35", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, confirm=False))
register_tuner("autobyte-confirm", _variant(confirm=True))
register_tuner("autobyte-history-confirm", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, confirm=True))
# stop 37: the detector's speed threshold raised to 3 scatters of the job's own pairs of checks of one configuration
# (noise_z=3; at most 50%): a host whose checks scatter as the H100's reads no noise as changes. The default since
# stop 37 (autobyte-noise is the tuner as it ships); autobyte-stop36 / autobyte-history-stop36 are without it
register_tuner("autobyte-noise", _variant(noise_z=3.0))
register_tuner("autobyte-history-noise", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, noise_z=3.0))
register_tuner("autobyte-stop36", _variant(noise_z=None))
register_tuner("autobyte-history-stop36", _variant(history_dir=_HISTORY, history_write=_HISTORY_WRITE, noise_z=None))

# stop 39: the mover leaves a configuration that has run 2 windows here only when another's mean beats its mean by 2
# standard deviations of the difference (the ledger's own scatter) as well as by min_gain (mover_z=2; off as it ships)
register_tuner("autobyte-moverz", _variant(mover_z=2.0))


def _history_pick(space: Any, initial: Any) -> Any:
    from autobyte.meta import JobHistory

    return JobHistory(_HISTORY, write=False).pick(space, initial)[0]


# the fair static baseline of autobyte-history: static at the configuration the same history picks
register_tuner("static-history", _static_from("static-history", _history_pick))


def _screen(factors: tuple[float, ...] = (0.25, 4.0), **fixed: Any) -> Callable[..., Tuner]:
    """AutoByte that, in every set of conditions, first measures a fixed pattern around its start whatever the
    predictor says: the start and its partition times each of ``factors`` at the start's credit multiple (the
    nearest configurations of the space), each once, then explores as it ships.

    Stop 40 (docs/benchmarks.md 7.24): following the conditions is worth almost nothing on the suite's scenarios,
    while the best static configuration's gain over the default is told apart in a median 3.2 windows; the tuner
    as it ships does not try it because the network ranks other configurations first. The pattern's steps are
    4x, large enough for one window to see (neighbouring configurations differ by less than a window's noise)."""
    def factory(network: Any = None, background: bool = True, adapt_time_s: float = 1.0) -> Tuner:
        from autobyte.core.space import Config, SearchSpace
        from autobyte.meta import AutoByteTuner

        class Screen:
            """The tuner's explorer, asked only once every point of the pattern is measured in these conditions."""

            def __init__(self, inner: Any, pattern: list[Config]) -> None:
                self.inner, self.pattern = inner, pattern

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

            def propose(self, space: SearchSpace, cands: Any, predicted: Any, measured: dict[Config, float],
                        current: Config, speed: float, sigma: float, horizon: float, allowance: float | None,
                        misses: int = 0, equivalence: Any = None, *rest: Any, skip: Any = ()) -> Any:
                same = set() if equivalence is None else {equivalence.of(c) for c in [*measured, current]}
                pending = [] if horizon <= self.inner.trial_iters else self.pattern  # no room for a trial here
                for cfg in pending:
                    if (cfg == current or cfg in measured or cfg in skip
                            or (equivalence is not None and equivalence.of(cfg) in same)):
                        continue
                    return cfg, (f"screen: {cfg}, a step of the fixed pattern around the start, measured once in these "
                                 f"conditions whatever the prediction ({predicted[space.index(cfg)]:.1f} samples/s; "
                                 f"best measured {max(measured.values()):.1f})"), 0.0
                return self.inner.propose(space, cands, predicted, measured, current, speed, sigma, horizon, allowance,
                                          misses, equivalence, *rest, skip=skip)

        class Screened(AutoByteTuner):
            def start(self, space: SearchSpace, initial: Config) -> Config:
                first = super().start(space, initial)
                inner = self.explorer.inner if isinstance(self.explorer, Screen) else self.explorer
                pattern: list[Config] = [first]
                for f in factors:
                    cfg = space.nearest(Config.from_multiple(max(1, int(first.partition_bytes * f)), first.credit_multiple))
                    if cfg not in pattern:
                        pattern.append(cfg)
                self.explorer = Screen(inner, pattern)  # type: ignore[assignment]
                return first

            # the pattern is the job's start's: a resumed job (started at the configuration in force) keeps it
            def state_dict(self) -> dict[str, Any]:
                return {**super().state_dict(), "screen_pattern": [[c.partition_bytes, c.credit_bytes] for c in self.explorer.pattern]}

            def load_state_dict(self, state: dict[str, Any]) -> None:
                state = dict(state)
                pattern = [Config(int(p), int(c)) for p, c in state.pop("screen_pattern")]
                super().load_state_dict(state)
                self.explorer.pattern = pattern

        return Screened(network, background=background, adapt_time_s=adapt_time_s, **fixed)

    return factory


# stop 40: the pattern (the start, its partition /4 and x4) measured in every set of conditions before the explorer
register_tuner("autobyte-screen", _screen())
