"""The `realistic` suites' scenarios (issue 43): jobs of 800 iterations or more whose conditions hold for 200 or more.

Five fours, three of another and two of others judged as held out and then read to design the tuner (`realistic`,
tagged ``tune``), the four that judge it now (`realistic-heldout`), and two jobs of 1800 iterations whose conditions hold for 600 (`realistic-long`,
held out), each written before any run of it. :mod:`autobyte.bench._scenarios` builds the suites from
:func:`realistic_scenarios` and :func:`realistic_long_scenarios`.
"""

from __future__ import annotations

from .emulation import scaled_mbit
from ._scenarios import Condition, Phase, Scenario


def realistic_scenarios() -> tuple[tuple[Scenario, ...], tuple[Scenario, ...]]:
    """``(tune, heldout)``: the `realistic` suite's 25 scenarios, in the order its fours were written, and
    `realistic-heldout`'s 4."""
    # realistic (issue 43; written before any run of it for judging, then read to design the tuner's search: tune now):
    # jobs of 800 iterations whose conditions hold for 200 iterations or more, as a shared cluster's do, four kinds no
    # other scenario combines: nothing changes; a parameter server whose link steps; a model no other measuring suite
    # trains (DenseNet-121, emulated at the paper's compute/link ratio: V100 compute x 2, the paper's 10 and 3 Gbit/s
    # / 2); the compute itself changing (other jobs share both accelerators, then the link too). Sized to run 3
    # methods x 2 repeats in about an hour on the 2-core host (0.10-0.24 s per iteration measured per condition). The
    # compute is 3x slower, not 2x: at 2000 Mbit/s the CNN's 2x hid behind the link (+6% per iteration measured, 3x +38%).
    realistic = (
        Scenario("realistic-steady", "cnn", (Phase(800, Condition(1000)),), "tune", 16,
                 "CNN at 1000 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("realistic-ps", "cnn", tuple(Phase(200, Condition(r)) for r in (2500, 800) * 2), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link steps 2500/800 Mbit/s "
                 "every 200 iterations (another job's traffic comes and goes), 800 iterations", arch="ps"),
        Scenario("realistic-densenet121", "emu:densenet121",
                 tuple(Phase(200, Condition(r)) for r in (scaled_mbit(10.0, 2.0), scaled_mbit(3.0, 2.0)) * 2), "tune", 32,
                 "DenseNet-121 emulated 2x slower than a V100 (batch 32, 32 MB in 121 tensors), a model no other measuring "
                 "suite trains; links 5000/1500 Mbit/s (the paper's 10/3 Gbit/s / 2) every 200 iterations, 800 iterations",
                 2.0),
        Scenario("realistic-shared-compute", "cnn",
                 (Phase(200, Condition(2000)), Phase(200, Condition(2000, slowdown=3.0, slow_ranks=(0, 1))),
                  Phase(200, Condition(1000, slowdown=3.0, slow_ranks=(0, 1))), Phase(200, Condition(2000))), "tune", 16,
                 "CNN at 2000 Mbit/s; two other jobs share both accelerators (every rank 3x slower) from iteration 200, "
                 "and the link too (1000 Mbit/s) from 400, gone at 600; 800 iterations"),
    )
    # ...and four more (written before any run of them as the first `realistic-heldout` suite, judged once with the
    # tuner at bb79198, then read to design the detector's confirmation: tune now; named `heldout-realistic-*` then):
    # a steady link-bound job of a larger batch; a parameter server whose link rises from slow; DenseNet-169 (57 MB in
    # 170 tensors, emulated at V100 compute x 2, batch 16); the compute changing on one worker, then on both with the
    # link. About an hour for 3 methods x 2 repeats on the 2-core host, as the first four.
    realistic_rising = (
        Scenario("realistic-steady-slow-link", "cnn", (Phase(800, Condition(600)),), "tune", 32,
                 "CNN, batch 32, at 600 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("realistic-ps-rising", "cnn", tuple(Phase(200, Condition(r)) for r in (1200, 4000) * 2), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link steps 1200/4000 Mbit/s "
                 "every 200 iterations, from the slow rate, 800 iterations", arch="ps"),
        Scenario("realistic-densenet169", "emu:densenet169",
                 tuple(Phase(200, Condition(r)) for r in (2500, 6000) * 2), "tune", 16,
                 "DenseNet-169 emulated 2x slower than a V100 (batch 16, 57 MB in 170 tensors), a model "
                 "the meta-network never trained on; links 2500/6000 Mbit/s every 200 iterations, from the slow rate, 800 iterations", 2.0),
        Scenario("realistic-straggler", "cnn",
                 (Phase(200, Condition(1500)), Phase(200, Condition(1500, slowdown=3.0)),
                  Phase(200, Condition(600, slowdown=2.0, slow_ranks=(0, 1))), Phase(200, Condition(1500))), "tune", 16,
                 "CNN at 1500 Mbit/s; rank 1 computes 3x slower (another job on its accelerator) from iteration 200; "
                 "from 400 both ranks 2x slower and the link at 600 Mbit/s; all gone at 600; 800 iterations"),
    )
    # ...and a third four (written before any run of them as the second `realistic-heldout` suite, judged once with
    # the tuner at 9aafdc6, then read to design the step rule's confirmation: tune now; named `heldout-realistic-*`
    # then): a steady job on a fast link (little to win); a parameter server whose link falls from fast; DenseNet-169
    # at batch 32 on links that fall from fast; compute shared on both workers, then on one with a slower link.
    realistic_falling = (
        Scenario("realistic-steady-fast-link", "cnn", (Phase(800, Condition(3000)),), "tune", 16,
                 "CNN at 3000 Mbit/s throughout (800 iterations): nothing changes, little to win"),
        Scenario("realistic-ps-falling", "cnn", tuple(Phase(200, Condition(r)) for r in (5000, 1500) * 2), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link steps 5000/1500 Mbit/s "
                 "every 200 iterations, from the fast rate, 800 iterations", arch="ps"),
        Scenario("realistic-densenet169-bs32", "emu:densenet169",
                 tuple(Phase(200, Condition(r)) for r in (4000, 1500) * 2), "tune", 32,
                 "DenseNet-169 emulated 2x slower than a V100 (batch 32, 57 MB in 170 tensors), a model the "
                 "meta-network never trained on; links 4000/1500 Mbit/s every 200 iterations, from the fast rate, 800 iterations", 2.0),
        Scenario("realistic-shared-compute-one-rank", "cnn",
                 (Phase(200, Condition(2500)), Phase(200, Condition(2500, slowdown=2.0, slow_ranks=(0, 1))),
                  Phase(200, Condition(1000, slowdown=3.0, slow_ranks=(0,))), Phase(200, Condition(2500))), "tune", 16,
                 "CNN at 2500 Mbit/s; another job shares both accelerators (every rank 2x slower) from iteration 200; "
                 "from 400 it shares rank 0's alone (3x slower) and the link falls to 1000 Mbit/s; all gone at 600; "
                 "800 iterations"),
    )
    # ...and a fourth four (written before any run of them as the third `realistic-heldout` suite, judged once with
    # the tuner at 4ba6686, then read to design the guard's measurement of the start in each set of conditions: tune
    # now; named `heldout-realistic-*` then): a steady job of a small batch (batch 8: the link's share of an iteration
    # is the largest of any realistic scenario); a parameter server on three rates; DenseNet-169 at batch 8 on links
    # that rise from slow; one worker's compute slowed, then the link slowed alone, then both workers' compute.
    realistic_batch8 = (
        Scenario("realistic-steady-bs8", "cnn", (Phase(800, Condition(2000)),), "tune", 8,
                 "CNN, batch 8, at 2000 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("realistic-ps-three-rates", "cnn",
                 tuple(Phase(200, Condition(r)) for r in (3000, 700, 1800, 700)), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 3000, 700, 1800, "
                 "then 700 Mbit/s, 200 iterations each, 800 iterations", arch="ps"),
        Scenario("realistic-densenet169-bs8", "emu:densenet169",
                 tuple(Phase(200, Condition(r)) for r in (2000, 5000) * 2), "tune", 8,
                 "DenseNet-169 emulated 2x slower than a V100 (batch 8, 57 MB in 170 tensors), a model the "
                 "meta-network never trained on; links 2000/5000 Mbit/s every 200 iterations, from the slow rate, 800 iterations", 2.0),
        Scenario("realistic-compute-then-link", "cnn",
                 (Phase(200, Condition(1200)), Phase(200, Condition(1200, slowdown=2.0, slow_ranks=(0,))),
                  Phase(200, Condition(600)), Phase(200, Condition(1200, slowdown=2.0, slow_ranks=(0, 1)))), "tune", 16,
                 "CNN at 1200 Mbit/s; rank 0 computes 2x slower from iteration 200; from 400 its compute is back and "
                 "the link falls to 600 Mbit/s; from 600 the link is back and both ranks compute 2x slower; 800 iterations"),
    )
    # ...and three of a fifth four (written before any run of them as the fourth `realistic-heldout` suite, judged
    # twice with the tuner at f6327a5 and ab9b7a3, then read to design the search's hold of an ended race: tune now;
    # named `heldout-realistic-*` then): a steady job at batch 24 on a middling link; a parameter server whose link
    # falls in three steps and comes half back; every worker's compute slowed, then the link alone, then one
    # worker's compute. (The fourth, DenseNet-169 on falling links, was not read: it is held out still.)
    realistic_steps = (
        Scenario("realistic-steady-bs24", "cnn", (Phase(800, Condition(1500)),), "tune", 24,
                 "CNN, batch 24, at 1500 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("realistic-ps-falling-steps", "cnn",
                 tuple(Phase(200, Condition(r)) for r in (4000, 2000, 900, 2000)), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 4000, 2000, 900, "
                 "then 2000 Mbit/s, 200 iterations each, 800 iterations", arch="ps"),
        Scenario("realistic-compute-link-straggler", "cnn",
                 (Phase(200, Condition(1800)), Phase(200, Condition(1800, slowdown=2.5, slow_ranks=(0, 1))),
                  Phase(200, Condition(900)), Phase(200, Condition(1800, slowdown=2.0, slow_ranks=(1,)))), "tune", 16,
                 "CNN at 1800 Mbit/s; other jobs share both accelerators (every rank 2.5x slower) from iteration 200; "
                 "from 400 the compute is back and the link falls to 900 Mbit/s; from 600 the link is back and rank 1 "
                 "computes 2x slower; 800 iterations"),
    )
    # ...and one of a sixth four (written before any run of it as the fifth `realistic-heldout` suite, judged once
    # with the tuner at 89c2abe, then its decisions read to design the carrying of an unfinished race across a
    # change: tune now; named `heldout-realistic-ps-rising-steps` then): a parameter server whose link rises in two
    # steps and comes half back.
    realistic_rising_steps = (
        Scenario("realistic-ps-rising-steps", "cnn",
                 tuple(Phase(200, Condition(r)) for r in (800, 1600, 3200, 1600)), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 800, 1600, 3200, "
                 "then 1600 Mbit/s, 200 iterations each, 800 iterations", arch="ps"),
    )
    # ...and one of the sixth four's successors (written before any run of it as a `realistic-heldout` scenario,
    # judged three times, with the tuner at 9aafdc6's successors to a508e09, then its decisions read to find why the
    # tuner ends at the default's speed where the grids pick <1 MiB, 4X>: tune now; named
    # `heldout-realistic-link-then-compute` then, replaced in `realistic-heldout` before it was read): the link halved,
    # then every worker's compute slowed on the fast link, then one worker's on the slow one.
    realistic_link_then_compute = (
        Scenario("realistic-link-then-compute", "cnn",
                 (Phase(200, Condition(2200)), Phase(200, Condition(1100)),
                  Phase(200, Condition(2200, slowdown=2.0, slow_ranks=(0, 1))),
                  Phase(200, Condition(1100, slowdown=1.5, slow_ranks=(0,)))), "tune", 16,
                 "CNN at 2200 Mbit/s; the link falls to 1100 Mbit/s from iteration 200; from 400 it is back and other "
                 "jobs share both accelerators (every rank 2x slower); from 600 the link falls to 1100 again and rank 0 "
                 "alone computes 1.5x slower; 800 iterations"),
    )
    # ...and a seventh four (written before any run of them as the sixth `realistic-heldout` suite, for judging the
    # tuner once an ended race holds its winner; judged with the tuner's versions of docs/benchmarks.md 2.8 and 2.10,
    # then its runs' CPU figures read to design the budget that counts the tuner's calls beside its fits: tune now;
    # named `heldout-realistic-*` then): a steady job at batch 12 on a middling link; a parameter server whose link
    # doubles, falls below where it began and comes back; DenseNet-169 at batch 16 on links that fall from fast (held
    # out since the fifth four, never read before); the link doubled from slow, then every worker's compute slowed on
    # the fast link and still on the slow one.
    realistic_dip = (
        Scenario("realistic-steady-bs12", "cnn", (Phase(800, Condition(1200)),), "tune", 12,
                 "CNN, batch 12, at 1200 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("realistic-ps-dip", "cnn",
                 tuple(Phase(200, Condition(r)) for r in (1800, 3600, 1000, 1800)), "tune", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 1800, 3600, 1000, "
                 "then 1800 Mbit/s, 200 iterations each, 800 iterations", arch="ps"),
        Scenario("realistic-densenet169-falling", "emu:densenet169",
                 tuple(Phase(200, Condition(r)) for r in (3500, 1200) * 2), "tune", 16,
                 "DenseNet-169 emulated 2x slower than a V100 (batch 16, 57 MB in 170 tensors), a model the "
                 "meta-network never trained on; links 3500/1200 Mbit/s every 200 iterations, from the fast rate, 800 iterations", 2.0),
        Scenario("realistic-rise-then-shared", "cnn",
                 (Phase(200, Condition(900)), Phase(200, Condition(1800)),
                  Phase(200, Condition(1800, slowdown=1.5, slow_ranks=(0, 1))),
                  Phase(200, Condition(900, slowdown=1.5, slow_ranks=(0, 1)))), "tune", 16,
                 "CNN at 900 Mbit/s; the link doubles to 1800 Mbit/s from iteration 200; from 400 other jobs share both "
                 "accelerators (every rank 1.5x slower); from 600 the link falls back to 900 while they still share "
                 "them; 800 iterations"),
    )
    # realistic-heldout (written before any run of it, for judging the tuner whose budget counts its calls beside its
    # fits; the suites of that name before were read to design the tuner and are in `realistic` now). Jobs of 800
    # iterations whose conditions hold for 200, none a condition sequence of another suite's: a steady link-bound job
    # at batch 20; a parameter server whose link falls, comes back and falls further; DenseNet-169, a model the
    # meta-network never trained on, at batch 24 on links that rise from slow (`tune` scenarios train it at batches 8,
    # 16 and 32 on other links); one worker's compute slowed, then the link halved under it, then every worker's
    # compute slowed on the fast link. About an hour and a half for 3 methods x 2 repeats on the 2-core host.
    realistic_heldout = (
        Scenario("heldout-realistic-steady-bs20", "cnn", (Phase(800, Condition(800)),), "heldout", 20,
                 "CNN, batch 20, at 800 Mbit/s throughout (800 iterations): nothing changes"),
        Scenario("heldout-realistic-ps-two-dips", "cnn",
                 tuple(Phase(200, Condition(r)) for r in (2400, 1100, 2400, 700)), "heldout", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 2400, 1100, 2400, "
                 "then 700 Mbit/s, 200 iterations each, 800 iterations", arch="ps"),
        Scenario("heldout-realistic-densenet169-bs24", "emu:densenet169",
                 tuple(Phase(200, Condition(r)) for r in (1800, 4500) * 2), "heldout", 24,
                 "DenseNet-169 emulated 2x slower than a V100 (batch 24, 57 MB in 170 tensors), a model the "
                 "meta-network never trained on; links 1800/4500 Mbit/s every 200 iterations, from the slow rate, 800 iterations", 2.0),
        Scenario("heldout-realistic-straggler-then-shared", "cnn",
                 (Phase(200, Condition(1400)), Phase(200, Condition(1400, slowdown=2.0, slow_ranks=(1,))),
                  Phase(200, Condition(700, slowdown=2.0, slow_ranks=(1,))),
                  Phase(200, Condition(1400, slowdown=1.5, slow_ranks=(0, 1)))), "heldout", 16,
                 "CNN at 1400 Mbit/s; rank 1 computes 2x slower from iteration 200; from 400 the link falls to 700 "
                 "Mbit/s while rank 1 is still slower; from 600 the link is back and other jobs share both accelerators "
                 "(every rank 1.5x slower); 800 iterations"),
    )
    return (realistic + realistic_rising + realistic_falling + realistic_batch8 + realistic_steps + realistic_rising_steps
            + realistic_link_then_compute + realistic_dip, realistic_heldout)


def realistic_long_scenarios() -> tuple[Scenario, ...]:
    """`realistic-long`'s 2 held-out scenarios: jobs of 1800 iterations whose conditions hold for 600."""
    # realistic-long (written before any run of it, for judging whether the tuner pays on jobs longer than the
    # `realistic` suites' 800 iterations: a search that costs 1-2% of an 800-iteration job's time costs less of a longer
    # one, and what it finds keeps paying). Conditions hold for 600 iterations, 1-2 minutes on the 2-core host (the
    # issue's jobs change every few minutes); none is a condition sequence of another suite's: a parameter server whose
    # link falls and comes back (the conditions seen first return, so what was measured there is reused); a CNN whose
    # link halves, then comes back while other jobs share both accelerators. About an hour for 3 methods x 2 repeats.
    return (
        Scenario("heldout-long-ps-return", "cnn",
                 tuple(Phase(600, Condition(r)) for r in (2000, 900, 2000)), "heldout", 16,
                 "CNN (its Gluon twin) on MXNet dist_sync, a server beside each worker; the link at 2000, 900, then 2000 "
                 "Mbit/s again, 600 iterations each, 1800 iterations", arch="ps"),
        Scenario("heldout-long-link-then-compute", "cnn",
                 (Phase(600, Condition(1600)), Phase(600, Condition(800)),
                  Phase(600, Condition(1600, slowdown=2.0, slow_ranks=(0, 1)))), "heldout", 16,
                 "CNN at 1600 Mbit/s; the link at 800 Mbit/s from iteration 600; from 1200 it is back and other jobs share "
                 "both accelerators (every rank 2x slower); 1800 iterations"),
    )
