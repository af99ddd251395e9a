"""The contract every communication engine passes, on real ranks.

An engine is driven through a *harness* (:class:`Harness`): it launches a
2-worker job that trains a small model with the engine and reports, per
worker, the final parameters and what the engine did (:class:`RankOutput`).
The shipped harnesses run real jobs on this machine:

* :class:`TorchHarness`: the PyTorch engine, 2 CPU processes on gloo
  (``autobyte.testing._torch_worker``); the unscheduled path is DDP.
* :class:`KVStoreHarness`: the MXNet KVStore engine, a loopback ``dist_sync``
  parameter server (scheduler, server and 2 workers as processes;
  ``autobyte.testing._gluon_worker``); the unscheduled path is the Trainer's own
  push/pull.
* :class:`HorovodHarness`: the MXNet Horovod engine under ``horovodrun --gloo``;
  the unscheduled path is ``horovod.mxnet.DistributedTrainer``.

The checks (``check_*``) take a harness and a scratch directory and raise
:class:`AssertionError` naming what broke::

    from autobyte.testing import engine_contract as ec

    def test_my_engine(tmp_path):
        ec.check_engine(MyHarness(), tmp_path)

``tests/contract/test_engine_contract.py`` runs every check on every harness; a harness
whose framework is absent says why (:meth:`Harness.unavailable`) and is skipped.
"""

from __future__ import annotations

import abc
import importlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core.space import Config
from ._tuners import SwitchOnce

#: (partition_bytes, credit_bytes, reconfigure every N steps or 0)
ConfigSpec = tuple[int, int, int]


@dataclass(frozen=True)
class Job:
    """One 2-worker training job.

    Attributes:
        configs: configurations to train with, one after the other from the
            same initial weights (a harness may run one job per entry).
        unscheduled: train through the framework's own path instead (the reference).
        switch: ``(partition_bytes, credit_bytes)`` that :class:`SwitchOnce`
            picks at the first window; ``None``: no tuner.
        window_iters, warmup_iters: the window protocol's.
        steps: training steps (batches).
        skew: worker 1 sleeps at random (up to tens of ms) during its steps.
        die_at: worker 1 exits abruptly (``os._exit``) at this step.
        timeout_s: the engine's ``timeout_s``.
    """

    configs: tuple[ConfigSpec, ...] = ((4096, 8192, 0),)
    unscheduled: bool = False
    switch: tuple[int, int] | None = None
    window_iters: int = 5
    warmup_iters: int = 2
    steps: int = 20
    skew: bool = False
    die_at: int | None = None
    timeout_s: float = 60.0

    def to_json(self, **extra: Any) -> str:
        return json.dumps({**asdict(self), **extra})


@dataclass
class RankOutput:
    """What one worker of a job reported.

    ``runs`` holds one dict per configuration of the job (``config``,
    ``reconfigurations`` as :meth:`DecisionRecord.to_dict` dicts,
    ``n_messages``, ``n_tensors``, ``max_message_bytes``, ``message_bytes``,
    ``tensor_bytes``); ``params`` the final parameters of each run;
    ``error``/``message``/``waited`` what a worker that lost its peer reported.
    """

    rank: int
    returncode: int
    output: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    params: list[list[np.ndarray]] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    waited: float = 0.0


class Harness(abc.ABC):
    """How the contract runs one engine. Subclass it for a new engine."""

    #: a short name (test ids)
    name: str = "engine"
    #: configurations the equivalence check trains with: a split one with credit 1X, a fused one
    equivalence_configs: tuple[ConfigSpec, ...] = ((1024, 1024, 0), (1 << 20, 1 << 20, 0))
    #: how often the rank-skew check reconfigures by hand on every rank (0: through the tuner only)
    skew_reconfigure_every: int = 0
    #: whether a lost peer's error names the lost rank (a parameter server cannot tell which worker)
    names_lost_rank: bool = True
    #: steps of the rank-skew job
    skew_steps: int = 40

    def unavailable(self) -> str | None:
        """Why the engine cannot run here (a missing framework), or ``None``."""
        return None

    @abc.abstractmethod
    def run(self, out: Path, job: Job) -> list[RankOutput]:
        """Run ``job`` on 2 workers, with ``out`` as scratch space; one output per worker, by rank."""

    @abc.abstractmethod
    def build(self, **kwargs: Any) -> Any:
        """Build the engine's public entry point in this process with ``kwargs`` (the bad-input check)."""


def _read(out: Path, rank: int, returncode: int, output: str) -> RankOutput:
    r = RankOutput(rank, returncode, output)
    jf = out / f"rank{rank}.json"
    if jf.exists():
        info = json.loads(jf.read_text())
        r.runs = list(info.get("runs", []))
        r.error, r.message, r.waited = info.get("error"), str(info.get("message", "")), float(info.get("waited", 0.0))
    nf = out / f"rank{rank}.npz"
    if nf.exists() and r.runs:
        with np.load(nf, allow_pickle=False) as z:
            if "c0_p0" in z.files:
                r.params = [[z[f"c{k}_p{i}"] for i in range(sum(f.startswith(f"c{k}_") for f in z.files))]
                            for k in range(len(r.runs))]
            else:  # one run: every array but the losses, by name
                r.params = [[z[k] for k in sorted(z.files) if k != "losses"]]
    return r


def _pythonpath() -> dict[str, str]:
    """Workers import this copy of autobyte, whatever is installed."""
    root = str(Path(__file__).resolve().parents[2])
    return {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


# ------------------------------------------------------------------ harnesses


class TorchHarness(Harness):
    """The PyTorch engine (:func:`autobyte.integrations.torch.schedule`), 2 CPU ranks on gloo."""

    name = "torch"
    equivalence_configs = ((4096, 4096, 0), (16384, 262144, 0), (1 << 20, 1 << 20, 0), (8192, 32768, 3))
    skew_reconfigure_every = 7
    skew_steps = 60

    def __init__(self, **worker_opts: Any) -> None:
        #: extra options for the worker (``optimizer``, ``overlap``, ``backend``)
        self.worker_opts = worker_opts

    def unavailable(self) -> str | None:
        try:
            importlib.import_module("torch.distributed")
        except ImportError as exc:
            return f"PyTorch is not importable ({exc}); pip install 'autobyte[torch]'"
        return None

    def run(self, out: Path, job: Job) -> list[RankOutput]:
        from . import run_ranks

        out.mkdir(parents=True, exist_ok=True)
        res = run_ranks(["-m", "autobyte.testing._torch_worker", str(out), job.to_json(**self.worker_opts)], 2,
                     timeout_s=job.timeout_s + 240, env=_pythonpath())
        return [_read(out, r.rank, r.returncode, r.stdout + r.stderr) for r in res]

    def build(self, **kwargs: Any) -> Any:
        import torch

        from ..integrations.torch import schedule

        m = torch.nn.Linear(4, 2)
        return schedule(m, torch.optim.SGD(m.parameters(), lr=0.1), **kwargs).close()


class KVStoreHarness(Harness):
    """The MXNet KVStore engine (``AutoByteHandler(engine="kvstore")``) on a loopback ``dist_sync`` job."""

    name = "kvstore"
    names_lost_rank = False
    engine = "kvstore"
    #: parameter servers of a job, and CPU contexts per worker (each batch split across them)
    n_servers = 1
    contexts = 1

    def unavailable(self) -> str | None:
        try:
            importlib.import_module("mxnet")
        except (ImportError, OSError) as exc:
            return f"MXNet is not importable ({exc}); pip install 'autobyte[mxnet]'"
        return None

    def run(self, out: Path, job: Job) -> list[RankOutput]:
        if len(job.configs) > 1 and not job.unscheduled:  # one configuration per parameter-server job
            outs = [self.run(out / f"c{k}", replace(job, configs=(c,))) for k, c in enumerate(job.configs)]
            return [RankOutput(r, max(abs(o[r].returncode) for o in outs), "".join(o[r].output for o in outs),
                               [run for o in outs for run in o[r].runs], [p for o in outs for p in o[r].params])
                    for r in range(2)]
        out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "autobyte.testing._gluon_worker", str(out), job.to_json(engine=self.engine, contexts=self.contexts)]
        return self._launch(out, argv, job)

    def _launch(self, out: Path, argv: list[str], job: Job) -> list[RankOutput]:
        from ..integrations.mxnet import launch_local_ps

        res = launch_local_ps(argv, n_workers=2, n_servers=self.n_servers, timeout_s=job.timeout_s + 120, env=_pythonpath(),
                              stop_on_failure=job.die_at is None)
        return [_read(out, rank, r.returncode, r.output) for rank, r in enumerate(res)]

    def build(self, **kwargs: Any) -> Any:
        from ..integrations.mxnet import AutoByteHandler

        return AutoByteHandler(engine=self.engine, **kwargs)


class HorovodHarness(KVStoreHarness):
    """The MXNet Horovod engine (``AutoByteHandler(engine="horovod")``) under ``horovodrun --gloo``."""

    name = "horovod"
    names_lost_rank = True
    engine = "horovod"

    def unavailable(self) -> str | None:
        try:
            importlib.import_module("horovod.mxnet")
        except (ImportError, OSError) as exc:
            return (f"horovod.mxnet is not importable ({exc}); build Horovod 0.28.1 with HOROVOD_WITH_MXNET=1 "
                    "(see docs/mxnet.md)")
        if shutil.which("horovodrun") is None:
            return "horovodrun is not on PATH"
        return None

    def _launch(self, out: Path, argv: list[str], job: Job) -> list[RankOutput]:
        env = {**os.environ, **_pythonpath(), "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}
        cmd = ["horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", "--network-interface", "lo", *argv]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=job.timeout_s + 180,
                                  start_new_session=True)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = -9, f"horovodrun killed after {exc.timeout} s"
        return [_read(out, rank, rc, text) for rank in range(2)]


#: every shipped harness, by name
HARNESSES: dict[str, Callable[[], Harness]] = {"horovod": HorovodHarness, "kvstore": KVStoreHarness, "torch": TorchHarness}


# ------------------------------------------------------------------ the checks


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def _completed(outs: Sequence[RankOutput], what: str) -> None:
    _expect(len(outs) == 2, f"{what}: {len(outs)} workers reported, expected 2")
    for o in outs:
        _expect(o.returncode == 0 and bool(o.runs), f"{what}: worker {o.rank} failed (exit {o.returncode}):\n{o.output[-3000:]}")


def _max_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    _expect(len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b)), "parameter lists differ in shape")
    return max(float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in zip(a, b))


def _same_as(ref: Sequence[np.ndarray], got: Sequence[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    return all(np.allclose(x, y, rtol=rtol, atol=atol) for x, y in zip(ref, got))


def unscheduled(harness: Harness, out: Path, steps: int = 20) -> list[RankOutput]:
    """The reference: the framework's own unscheduled path, from the same weights and data (run once per harness)."""
    cache: dict[int, list[RankOutput]] = harness.__dict__.setdefault("_unscheduled", {})
    if steps not in cache:
        outs = harness.run(out / "unscheduled", Job(unscheduled=True, steps=steps))
        _completed(outs, f"{harness.name} unscheduled reference")
        cache[steps] = outs
    return cache[steps]


def check_matches_unscheduled(harness: Harness, out: Path) -> None:
    """Every configuration trains to the unscheduled path's parameters on every worker (scheduling changes *when*)."""
    ref = unscheduled(harness, out)
    outs = harness.run(out / "scheduled", Job(configs=harness.equivalence_configs))
    _completed(outs, f"{harness.name} scheduled")
    for o in outs:
        _expect(len(o.runs) == len(harness.equivalence_configs), f"worker {o.rank} reported {len(o.runs)} runs")
        for cfg, run, params in zip(harness.equivalence_configs, o.runs, o.params):
            _expect(_same_as(ref[o.rank].params[0], params),
                    f"{harness.name} worker {o.rank} with {cfg}: parameters differ from the unscheduled path's "
                    f"by up to {_max_diff(ref[o.rank].params[0], params):.3g}")
            _expect(run["message_bytes"] == run["tensor_bytes"],
                    f"{harness.name} {cfg}: messages carry {run['message_bytes']} bytes, the gradients {run['tensor_bytes']}")
    fixed = sorted((cfg[0], run["n_messages"], run["n_tensors"]) for cfg, run in zip(harness.equivalence_configs, outs[0].runs)
                   if not cfg[2])
    (_, n_small, n_tensors), (_, n_large, _) = fixed[0], fixed[-1]
    _expect(n_small > n_tensors, f"the smallest partition must split tensors: {n_small} messages for {n_tensors} tensors")
    _expect(n_large < n_small, f"the largest partition must plan fewer messages than the smallest: {n_large} vs {n_small}")


def check_reconfigures_at_an_agreed_iteration(harness: Harness, out: Path) -> None:
    """A decision on rank 0 applies on every worker from the same iteration, and loses no update."""
    start, target = (4096, 8192, 0), (1024, 2048)
    ref = unscheduled(harness, out)
    outs = harness.run(out / "switch", Job(configs=(start,), switch=target))
    _completed(outs, f"{harness.name} reconfiguration")
    records = [o.runs[0]["reconfigurations"] for o in outs]
    _expect(bool(records[0]), f"{harness.name}: no reconfiguration recorded; the tuner's decision was never applied")
    _expect(records[0] == records[1], f"{harness.name}: the workers recorded different reconfigurations: {records}")
    first = records[0][0]
    _expect(first["new"] == Config(*target).to_dict(), f"{harness.name}: reconfigured to {first['new']}, not {target}")
    _expect(0 < first["iteration"] < 20, f"{harness.name}: applied at iteration {first['iteration']}")
    for o in outs:
        run = o.runs[0]
        _expect(run["config"] == Config(*target).to_dict(), f"worker {o.rank} ends at {run['config']}, not {target}")
        _expect(run["max_message_bytes"] <= target[0],
                f"worker {o.rank}: a message of {run['max_message_bytes']} bytes after switching to partition {target[0]}")
        _expect(_same_as(ref[o.rank].params[0], o.params[0]),
                f"worker {o.rank}: after the reconfiguration the parameters differ from the unscheduled path's by up to "
                f"{_max_diff(ref[o.rank].params[0], o.params[0]):.3g}")


def check_rank_skew(harness: Harness, out: Path) -> None:
    """A worker slower at random, with reconfigurations on the way, never hangs and ends with the same parameters."""
    every = harness.skew_reconfigure_every
    job = Job(configs=((8192, 16384, every),), switch=(2048, 4096), steps=harness.skew_steps, skew=True)
    outs = harness.run(out / "skew", job)
    _completed(outs, f"{harness.name} under rank skew")
    a, b = outs[0].params[0], outs[1].params[0]
    _expect(len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b)),
            f"{harness.name}: under rank skew the workers end with different parameters "
            f"(up to {_max_diff(a, b):.3g} apart)")
    _expect(outs[0].runs[0]["reconfigurations"] == outs[1].runs[0]["reconfigurations"],
            f"{harness.name}: under rank skew the workers recorded different reconfigurations")


def check_lost_peer(harness: Harness, out: Path, timeout_s: float = 8.0) -> None:
    """A worker that dies mid-training is reported as ``PeerLostError`` within ``timeout_s`` (plus a margin)."""
    outs = harness.run(out / "lost", Job(configs=((8192, 16384, 0),), switch=(4096, 8192), steps=40, die_at=8,
                                         timeout_s=timeout_s))
    survivor = outs[0]
    _expect(survivor.error == "PeerLostError",
            f"{harness.name}: the surviving worker reported {survivor.error!r} (exit {survivor.returncode}), "
            f"not PeerLostError:\n{survivor.output[-3000:]}")
    _expect(survivor.waited < timeout_s + 10, f"{harness.name}: PeerLostError after {survivor.waited:.1f} s, "
                                              f"timeout_s={timeout_s:g}")
    _expect(f"timeout_s={timeout_s:g}" in survivor.message or harness.names_lost_rank,
            f"{harness.name}: the message must name timeout_s: {survivor.message}")
    if harness.names_lost_rank:
        _expect("rank 1" in survivor.message, f"{harness.name}: the message must name the lost rank: {survivor.message}")


#: (keyword arguments, exception, message pattern): the arguments every engine's entry point shares
BAD_INPUT: tuple[tuple[dict[str, Any], type[Exception], str], ...] = (
    ({"partition_bytes": 0}, ValueError, r"partition_bytes must be a positive integer.*, but got partition_bytes=0\."),
    ({"partition_bytes": 1.5}, TypeError, r"partition_bytes=1\.5"),
    ({"credit_bytes": "4MB"}, TypeError, r"credit_bytes must be a positive integer.*, but got credit_bytes='4MB'"),
    ({"timeout_s": 0}, ValueError, r"timeout_s must be a positive number of seconds, but got timeout_s=0\."),
    ({"timeout_s": float("nan")}, ValueError, r"timeout_s=nan"),
    ({"tuner": 3}, TypeError, r"tuner must be .*, but got tuner=3"),
    ({"tuner": "nope"}, ValueError, r"tuner must be one of .*, but got tuner='nope'"),
    ({"tuner": "static", "window_iters": 0}, ValueError, r"window_iters must be a positive integer, but got window_iters=0\."),
    ({"tuner": "static", "warmup_iters": -1}, ValueError, r"warmup_iters must be .*, but got warmup_iters=-1\."),
    ({"tuner": "static", "space": "grid"}, TypeError, r"space must be .*, but got space='grid'"),
)


def check_bad_input(harness: Harness) -> None:
    """Each bad argument of the shared surface is refused up front, naming the argument, rule and value."""
    import re

    for kwargs, exc, pattern in BAD_INPUT:
        try:
            harness.build(**kwargs)
        except exc as e:
            _expect(re.search(pattern, str(e)) is not None,
                    f"{harness.name}({kwargs}): the message {str(e)!r} does not match {pattern!r}")
        except Exception as e:
            raise AssertionError(f"{harness.name}({kwargs}) raised {type(e).__name__}: {e}, expected {exc.__name__}") from None
        else:
            raise AssertionError(f"{harness.name}({kwargs}) was accepted; expected {exc.__name__}")


def check_engine(harness: Harness, out: Path) -> None:
    """Every check of the contract, in turn."""
    check_bad_input(harness)
    check_matches_unscheduled(harness, out)
    check_reconfigures_at_an_agreed_iteration(harness, out)
    check_rank_skew(harness, out)
    check_lost_peer(harness, out)


__all__ = [
    "BAD_INPUT", "ConfigSpec", "HARNESSES", "Harness", "HorovodHarness", "Job", "KVStoreHarness", "RankOutput",
    "SwitchOnce", "TorchHarness", "check_bad_input", "check_engine", "check_lost_peer", "check_matches_unscheduled",
    "check_rank_skew", "check_reconfigures_at_an_agreed_iteration", "unscheduled",
]
