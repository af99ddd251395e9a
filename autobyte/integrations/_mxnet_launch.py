"""Start a local MXNet parameter-server job: scheduler, servers and workers on loopback.

Pure stdlib: the scheduler and the servers are ``python -c "import mxnet"``
processes (MXNet starts its server loop on import when ``DMLC_ROLE`` is
``server`` or ``scheduler``); the workers run the user's command.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Mapping, Sequence

from ..core._checks import check_int, check_positive


@dataclass(frozen=True)
class WorkerResult:
    """Exit status and combined output of one worker process."""

    rank_hint: int
    returncode: int
    output: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ps_env(role: str, port: int, n_workers: int, n_servers: int) -> dict[str, str]:
    """The ``DMLC_*`` variables of one process of a loopback job."""
    return {
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": "127.0.0.1",
        "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_SERVER": str(n_servers),
        "DMLC_NUM_WORKER": str(n_workers),
        "DMLC_NODE_HOST": "127.0.0.1",
    }


def launch_local_ps(
    command: Sequence[str],
    *,
    n_workers: int = 2,
    n_servers: int = 1,
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stop_on_failure: bool = True,
) -> list[WorkerResult]:
    """Run ``command`` as ``n_workers`` workers of a ``dist_sync`` job on 127.0.0.1.

    Starts one scheduler and ``n_servers`` servers, waits for every worker,
    and always ends every process it started (also on timeout or error).

    Args:
        command: the worker's argv, e.g. ``[sys.executable, "train.py"]``.
        n_workers: worker processes (>= 1).
        n_servers: server processes (>= 1).
        timeout_s: wall-clock limit for the whole job.
        env: extra environment variables for every process.
        cwd: working directory of every process.
        stop_on_failure: end the job as soon as one worker fails (the others
            would wait on the servers until their own ``timeout_s``); False
            lets every worker finish by itself (tests of that timeout).

    Returns:
        One :class:`WorkerResult` per worker, in start order (the KVStore
        rank is assigned by the scheduler and may differ from this order).

    Raises:
        ValueError: empty ``command``, bad counts or timeout.
        TimeoutError: the job did not finish within ``timeout_s``.
    """
    if isinstance(command, str) or not command:
        raise ValueError(f"command must be a non-empty argv list, but got command={command!r}.")
    check_int("n_workers", n_workers)
    check_int("n_servers", n_servers)
    check_positive("timeout_s", timeout_s, "seconds")
    port = free_port()
    base = dict(os.environ)
    base.update(env or {})
    # One engine thread per process: the job shares a small machine with its own servers.
    base.setdefault("OMP_NUM_THREADS", "1")
    base.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []

    def start(argv: Sequence[str], role: str) -> subprocess.Popen[bytes]:
        log = tempfile.TemporaryFile()
        logs.append(log)
        p = subprocess.Popen(
            list(argv), env={**base, **ps_env(role, port, n_workers, n_servers)}, cwd=cwd,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        procs.append(p)
        return p

    deadline = time.monotonic() + float(timeout_s)
    try:
        start([sys.executable, "-c", "import mxnet"], "scheduler")
        for _ in range(n_servers):
            start([sys.executable, "-c", "import mxnet"], "server")
        workers = [start(command, "worker") for _ in range(n_workers)]
        while any(w.poll() is None for w in workers):
            failed = [w for w in workers if w.returncode not in (None, 0)]
            if (failed and stop_on_failure) or procs[0].poll() not in (None, 0):
                break  # one worker died: the others would wait forever on the servers
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the local parameter-server job did not finish within timeout_s={timeout_s}; "
                    f"worker outputs:\n{_outputs(logs[1 + n_servers:])}"
                )
            time.sleep(0.05)
        results = []
        for i, w in enumerate(workers):
            if w.poll() is None:
                _kill(w)
            log = logs[1 + n_servers + i]
            log.seek(0)
            results.append(WorkerResult(i, int(w.returncode if w.returncode is not None else -9), log.read().decode(errors="replace")))
        return results
    finally:
        for p in procs:
            _kill(p)
        for log in logs:
            log.close()


def _outputs(logs: Sequence[IO[bytes]]) -> str:
    out = []
    for i, log in enumerate(logs):
        log.seek(0)
        out.append(f"--- worker {i} ---\n{log.read().decode(errors='replace')[-4000:]}")
    return "\n".join(out)


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait(timeout=5)
