"""Run real multi-process jobs on this host (tests, benchmarks, examples): ``autobyte.testing.run_ranks``.

Each rank is a separate ``python`` process with the environment variables
``torch.distributed``'s ``env://`` rendezvous reads (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as ``torchrun`` would set them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, NoReturn, Sequence


def exit_rank(code: int = 0) -> NoReturn:
    """End a rank whose results are written, without interpreter teardown.

    Call it after ``dist.destroy_process_group()``: at finalization gloo's and
    DDP's objects can abort a finished rank ("terminate called without an
    active exception", pytorch#179291), which would turn a run that succeeded
    into a failed one.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_ranks(
    argv: Sequence[str],
    world_size: int = 2,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    cwd: str | None = None,
    one_node_per_rank: bool = False,
    stream_rank0: bool = False,
) -> list[RankResult]:
    """Run ``python *argv`` as ``world_size`` ranks and wait for all of them.

    With ``one_node_per_rank`` every rank looks like a machine of its own
    (``NODE_RANK`` = rank, ``LOCAL_RANK`` 0), as Lightning's
    ``Trainer(num_nodes=world_size, devices=1)`` expects. With
    ``stream_rank0`` rank 0 writes to this process's terminal (progress bars)
    instead of being captured.

    Ranks still running after ``timeout_s`` are killed (their return code is
    then negative). Output is captured per rank.
    """
    port = free_port()
    procs = []
    t0 = time.monotonic()
    for rank in range(world_size):
        e = dict(os.environ)
        e.update(env or {})
        e.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if one_node_per_rank:
            e.update(LOCAL_RANK="0", NODE_RANK=str(rank), LOCAL_WORLD_SIZE="1")
        e.setdefault("OMP_NUM_THREADS", "1")
        pipe = None if (stream_rank0 and rank == 0) else subprocess.PIPE
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv], env=e, cwd=cwd, stdout=pipe, stderr=pipe, text=True,
                start_new_session=True,
            )
        )
    results: list[RankResult | None] = [None] * world_size
    try:
        for rank, p in enumerate(procs):
            left = max(0.1, timeout_s - (time.monotonic() - t0))
            try:
                out, err = p.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
                err = (err or "") + f"\n[autobyte.testing.run_ranks] rank {rank} killed after {timeout_s:g} s"
            results[rank] = RankResult(rank, p.returncode, out or "", err or "", time.monotonic() - t0)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return [r for r in results if r is not None]


def launch(*args: Any, **kwargs: Any) -> list[RankResult]:
    """Deprecated name of :func:`run_ranks` (it is not ``autobyte launch``, which shapes network namespaces).

    Warns with :class:`DeprecationWarning`; removed in the next release.
    """
    warnings.warn("autobyte.testing.launch is renamed autobyte.testing.run_ranks (the same function); "
                  "launch is removed in the next release.", DeprecationWarning, stacklevel=2)
    return run_ranks(*args, **kwargs)
