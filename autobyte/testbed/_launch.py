"""Run a command per worker inside the testbed's namespaces, following a trace."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Iterator, Mapping, Sequence

from ._control import ENV_VAR, ControlServer
from ._netns import Network
from ._state import TestbedError
from ._trace import BandwidthTrace, CompetingFlow, RateChange, check_mbit

#: Seconds processes get between SIGTERM and SIGKILL when a run stops.
STOP_GRACE_S = 3.0

#: Seconds PS servers and the scheduler get to exit after the last worker.
PS_DRAIN_S = 30.0

_PR_SET_PDEATHSIG = 1


class _Stop(BaseException):
    """Raised in the main thread by SIGINT/SIGTERM/SIGHUP."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stop_depth = 0
_stopping = False


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM/SIGHUP into :class:`_Stop`, once, so ``finally`` blocks clean up.

    Nested uses share one "already stopping" flag: a second Ctrl-C during the
    cleanup is ignored rather than cutting the cleanup short.
    """
    global _stop_depth, _stopping
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        global _stopping
        if _stopping:
            print("[launch] cleaning up, please wait", file=sys.stderr, flush=True)
            return
        _stopping = True
        raise _Stop(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, handler) for s in sigs}
    _stop_depth += 1
    try:
        yield
    finally:
        _stop_depth -= 1
        if _stop_depth == 0:
            for s, h in old.items():
                signal.signal(s, h)
            _stopping = False


_libc: Any = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


@dataclass
class _Proc:
    label: str
    role: str  # worker | server | scheduler | flow
    popen: subprocess.Popen[bytes]
    thread: threading.Thread | None = None


@dataclass(frozen=True)
class _FlowStop:
    """The point where a competing flow with ``until`` leaves (its sender is stopped)."""

    at: float
    unit: str
    flow: CompetingFlow


class Testbed:
    """Real workers in their own network namespaces, joined by ``tc``-shaped links.

    Creates the namespaces on ``__enter__`` (or :meth:`start`) and removes every
    namespace, link and qdisc it made on ``__exit__`` (or :meth:`stop`). Needs root.

    Args:
        n_workers: number of workers, each in its own namespace (1 to 250).
        bandwidth_mbit: rate of every link, both directions, in Mbit/s
            (default ``None``: unshaped, unless ``trace`` is given).
        up_mbit: worker-to-switch rate, overriding ``bandwidth_mbit``.
        down_mbit: switch-to-worker rate, overriding ``bandwidth_mbit``.
        delay_ms: one-way latency between workers, in ms (default 0).
        trace: a :class:`BandwidthTrace`; excludes the three rates above.
        state_dir: where the run's state file goes (default ``/run/autobyte``).

    Raises:
        TestbedError: not root, ``ip``/``tc`` missing, a network command failed.
        ValueError, TypeError: a bad argument (the message names it).

    Example:
        >>> with Testbed(2, bandwidth_mbit=100) as tb:               # doctest: +SKIP
        ...     rc = tb.run([sys.executable, "train.py"], timeout_s=600)
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        n_workers: int,
        *,
        bandwidth_mbit: float | None = None,
        up_mbit: float | None = None,
        down_mbit: float | None = None,
        delay_ms: float = 0.0,
        trace: BandwidthTrace | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.network = Network(n_workers, delay_ms=delay_ms, state_dir=state_dir)
        rates = {"bandwidth_mbit": bandwidth_mbit, "up_mbit": up_mbit, "down_mbit": down_mbit}
        for name, v in rates.items():
            if v is not None:
                check_mbit(name, v)
        if trace is not None:
            if not isinstance(trace, BandwidthTrace):
                raise TypeError(f"trace must be a BandwidthTrace, but got trace={trace!r}.")
            given = [k for k, v in rates.items() if v is not None]
            if given:
                raise ValueError(f"give either trace or {'/'.join(given)}, not both.")
            trace.check_ranks(n_workers)
        else:
            up = up_mbit if up_mbit is not None else bandwidth_mbit
            down = down_mbit if down_mbit is not None else bandwidth_mbit
            if (up is None) != (down is None):
                raise ValueError(
                    "give both up_mbit and down_mbit (or bandwidth_mbit for both), "
                    f"but got up_mbit={up_mbit!r}, down_mbit={down_mbit!r}."
                )
            if up is not None:
                trace = BandwidthTrace.constant(float(up), float(down))  # type: ignore[arg-type]
        self.trace = trace
        self.n_workers = n_workers

    # -- lifecycle --------------------------------------------------------
    def __enter__(self) -> "Testbed":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Create the namespaces and links, and apply the starting rates."""
        self.network.create()
        try:
            if self.trace is not None:
                for c in self.trace.changes:
                    if c.at == 0:
                        self._apply(c)
        except BaseException:
            self.network.destroy()
            raise

    def stop(self) -> None:
        """Remove every namespace, link and qdisc of the run (idempotent)."""
        problems = self.network.destroy()
        for p in problems:
            print(f"[launch] cleanup: {p}", file=sys.stderr, flush=True)

    @property
    def run_id(self) -> str:
        return self.network.run_id

    def address(self, rank: int) -> str:
        """IPv4 address of ``rank``'s interface."""
        return self.network.address(rank)

    def namespace(self, rank: int) -> str:
        return self.network.namespace(rank)

    def ifname(self, rank: int) -> str:
        return self.network.ifname(rank)

    def set_rates(self, up_mbit: float, down_mbit: float | None = None, *, ranks: Sequence[int] | None = None) -> None:
        """Re-shape links now (``tc change``); ``down_mbit`` defaults to ``up_mbit``."""
        check_mbit("up_mbit", up_mbit)
        if down_mbit is not None:
            check_mbit("down_mbit", down_mbit)
        self.network.set_rates(float(up_mbit), None if down_mbit is None else float(down_mbit),
                               ranks=None if ranks is None else list(ranks))

    def _apply(self, c: RateChange) -> None:
        self.network.set_rates(c.up_mbit, c.down_mbit, ranks=c.ranks)

    def exec_argv(self, rank: int, command: Sequence[str]) -> list[str]:
        """``command`` wrapped to run in ``rank``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(rank), *command]

    def worker_env(self, rank: int, *, master_port: int = 29500, control: str | None = None) -> dict[str, str]:
        """Environment variables a worker process gets (beside the launcher's own)."""
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(self.n_workers),
            # each namespace stands for one machine with one process
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": str(rank),
            "MASTER_ADDR": self.address(0),
            "MASTER_PORT": str(master_port),
            "GLOO_SOCKET_IFNAME": self.ifname(rank),
            "TP_SOCKET_IFNAME": self.ifname(rank),
            "AUTOBYTE_TESTBED_RUN_ID": self.run_id,
            "AUTOBYTE_TESTBED_ADDRS": ",".join(self.address(r) for r in range(self.n_workers)),
        }
        if control:
            env[ENV_VAR] = control
        return env

    # -- running ----------------------------------------------------------
    def run(
        self,
        command: Sequence[str],
        *,
        ps: bool = False,
        master_port: int = 29500,
        ps_port: int = 9091,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        prefix_output: bool = True,
        events_log: str | os.PathLike[str] | None = None,
        stdout: IO[str] | None = None,
    ) -> int:
        """Run ``command`` once per worker (and per PS role with ``ps=True``) and wait.

        Stops every process when one fails, on timeout, or on SIGINT/SIGTERM.

        Args:
            command: argv run in each worker's namespace.
            ps: also start an MXNet parameter-server scheduler (in rank 0's
                namespace) and one server per worker namespace, with ``DMLC_*``
                variables set (default False).
            master_port: ``MASTER_PORT`` for torch.distributed (default 29500).
            ps_port: ``DMLC_PS_ROOT_PORT`` (default 9091).
            timeout_s: stop everything after this many seconds (default no limit).
            env: extra environment variables for every process.
            prefix_output: prefix each output line with its process label (default True).
            events_log: append one JSON line per iteration notice and trace event here.
            stdout: where prefixed output goes (default ``sys.stdout``).

        Returns:
            0 when every worker succeeded; the first failing exit code; 124 on
            timeout; 128 + signal number when stopped by a signal.

        Raises:
            ValueError: empty command, bad port or timeout.
            TestbedError: the testbed is not started.
        """
        if isinstance(command, (str, bytes)) or not command:
            raise ValueError(f"command must be a non-empty list of arguments, but got command={command!r}.")
        for name, port in (("master_port", master_port), ("ps_port", ps_port)):
            if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                raise ValueError(f"{name} must be a TCP port in [1, 65535], but got {name}={port!r}.")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, but got timeout_s={timeout_s!r}.")
        if self.network.state is None:
            raise TestbedError("the testbed is not started; use `with Testbed(...) as tb:` or call start().")
        with stop_on_signals():
            return _Runner(self, list(command), ps=ps, master_port=master_port, ps_port=ps_port,
                           timeout_s=timeout_s, env=dict(env or {}), prefix_output=prefix_output,
                           events_log=events_log, stdout=stdout or sys.stdout).run()


class _Runner:
    def __init__(self, tb: Testbed, command: list[str], *, ps: bool, master_port: int, ps_port: int,
                 timeout_s: float | None, env: dict[str, str], prefix_output: bool,
                 events_log: str | os.PathLike[str] | None, stdout: IO[str]) -> None:
        self.tb = tb
        self.command = command
        self.ps = ps
        self.master_port = master_port
        self.ps_port = ps_port
        self.timeout_s = timeout_s
        self.extra_env = env
        self.prefix_output = prefix_output
        self.out = stdout
        self.out_lock = threading.Lock()
        self.procs: list[_Proc] = []
        self.events_fh = open(events_log, "a", encoding="utf-8") if events_log else None
        trace = tb.trace
        self.iter_events: list[RateChange | CompetingFlow | _FlowStop] = []
        self.time_events: list[RateChange | CompetingFlow | _FlowStop] = []
        if trace is not None:
            stops = [_FlowStop(f.until, f.unit, f) for f in trace.flows if f.until is not None]
            for ev in [c for c in trace.changes if c.at > 0] + list(trace.flows) + stops:
                (self.iter_events if ev.unit == "it" else self.time_events).append(ev)
        self.iter_events.sort(key=lambda e: e.at)
        self.time_events.sort(key=lambda e: e.at)
        self.boundaries = trace.iteration_boundaries() if trace is not None else []
        self.n_flows = 0
        self.flow_senders: dict[int, tuple[int, _Proc]] = {}  # id(flow) -> (index, its sender)
        self.last_iter = -1
        self.t0 = time.monotonic()

    # -- logging ----------------------------------------------------------
    def log(self, msg: str) -> None:
        with self.out_lock:
            print(f"[launch] {msg}", file=sys.stderr, flush=True)

    def record(self, **fields: Any) -> None:
        if self.events_fh is not None:
            fields = {"t": round(time.monotonic() - self.t0, 6), "wall": round(time.time(), 6),
                      "iteration": self.last_iter, **fields}
            self.events_fh.write(json.dumps(fields) + "\n")
            self.events_fh.flush()

    # -- processes --------------------------------------------------------
    def spawn(self, label: str, role: str, rank: int, argv: list[str], env: dict[str, str]) -> None:
        global _libc
        if _libc is None:
            try:
                _libc = ctypes.CDLL(None, use_errno=True)
            except OSError:  # pragma: no cover
                _libc = False
        full_env = {**os.environ, **self.extra_env, **env}
        if self.prefix_output:
            full_env.setdefault("PYTHONUNBUFFERED", "1")
        popen = subprocess.Popen(
            self.tb.exec_argv(rank, argv),
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.prefix_output else None,
            stderr=subprocess.STDOUT if self.prefix_output else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        proc = _Proc(label, role, popen)
        if self.prefix_output:
            proc.thread = threading.Thread(target=self._pump, args=(label, popen), daemon=True)
            proc.thread.start()
        self.procs.append(proc)

    def _pump(self, label: str, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdout is not None
        for raw in iter(popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.out_lock:
                self.out.write(f"[{label}] {line}\n")
                self.out.flush()

    def start_processes(self, control: str) -> None:
        tb = self.tb
        n = tb.n_workers
        if self.ps:
            dmlc = {
                "DMLC_PS_ROOT_URI": tb.address(0),
                "DMLC_PS_ROOT_PORT": str(self.ps_port),
                "DMLC_NUM_SERVER": str(n),
                "DMLC_NUM_WORKER": str(n),
            }
            base0 = tb.worker_env(0, master_port=self.master_port, control=control)
            self.spawn("sched", "scheduler", 0, self.command,
                       {**base0, **dmlc, "DMLC_ROLE": "scheduler", "DMLC_NODE_HOST": tb.address(0),
                        "DMLC_INTERFACE": tb.ifname(0)})
            for r in range(n):
                base = tb.worker_env(r, master_port=self.master_port, control=control)
                self.spawn(f"s{r}", "server", r, self.command,
                           {**base, **dmlc, "DMLC_ROLE": "server", "DMLC_NODE_HOST": tb.address(r),
                            "DMLC_INTERFACE": tb.ifname(r)})
        for r in range(n):
            env = tb.worker_env(r, master_port=self.master_port, control=control)
            if self.ps:
                env.update({"DMLC_PS_ROOT_URI": tb.address(0), "DMLC_PS_ROOT_PORT": str(self.ps_port),
                            "DMLC_NUM_SERVER": str(n), "DMLC_NUM_WORKER": str(n), "DMLC_ROLE": "worker",
                            "DMLC_NODE_HOST": tb.address(r), "DMLC_INTERFACE": tb.ifname(r)})
            self.spawn(f"w{r}", "worker", r, self.command, env)

    def start_flow(self, f: CompetingFlow) -> None:
        i = self.n_flows
        self.n_flows += 1
        port = 5201 + i
        py = [sys.executable, "-m", "autobyte.testbed._flow"]
        self.spawn(f"flow{i}-rx", "flow", f.dst,
                   py + ["serve", "--port", str(port), "--max-s", str(f.duration_s + 15.0), "--label", f"flow{i}"], {})
        self.spawn(f"flow{i}-tx", "flow", f.src,
                   py + ["send", "--host", self.tb.address(f.dst), "--port", str(port), "--duration-s", str(f.duration_s)], {})
        self.flow_senders[id(f)] = (i, self.procs[-1])
        self.log(f"competing flow {i}: rank {f.src} -> rank {f.dst} for {f.duration_s:g} s")
        self.record(event="flow", index=i, src=f.src, dst=f.dst, duration_s=f.duration_s)

    def stop_flow(self, stop: _FlowStop) -> None:
        started = self.flow_senders.get(id(stop.flow))
        if started is None:
            return
        i, proc = started
        if proc.popen.poll() is None:
            try:  # the receiver sees EOF and prints what it got
                os.killpg(proc.popen.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        self.log(f"competing flow {i} leaves at {stop.at:g} {stop.unit}")
        self.record(event="flow_end", index=i)

    def fire(self, ev: RateChange | CompetingFlow | _FlowStop) -> None:
        if isinstance(ev, _FlowStop):
            self.stop_flow(ev)
        elif isinstance(ev, RateChange):
            self.tb._apply(ev)
            who = "all ranks" if ev.ranks is None else f"ranks {list(ev.ranks)}"
            self.log(f"t={time.monotonic() - self.t0:.2f}s it={self.last_iter}: "
                     f"rate {ev.up_mbit:g} up / {ev.down_mbit:g} down Mbit/s ({who})")
            self.record(event="rate", up_mbit=ev.up_mbit, down_mbit=ev.down_mbit,
                        ranks=None if ev.ranks is None else list(ev.ranks))
        else:
            self.start_flow(ev)

    def on_iteration(self, k: int) -> None:
        if k > self.last_iter:
            self.last_iter = k
            self.record(event="iteration")
        while self.iter_events and self.iter_events[0].at <= k:
            self.fire(self.iter_events.pop(0))

    def stop_processes(self) -> None:
        live = [p for p in self.procs if p.popen.poll() is None]
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            for p in live:
                try:
                    os.killpg(p.popen.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + wait_s
            while live and time.monotonic() < deadline:
                live = [p for p in live if p.popen.poll() is None]
                if live:
                    time.sleep(0.05)
            if not live:
                break
        for p in self.procs:
            if p.thread is not None:
                p.thread.join(timeout=2.0)

    # -- main loop --------------------------------------------------------
    def run(self) -> int:
        state = self.tb.network.state
        assert state is not None
        control = str(state.path.with_suffix(".sock"))
        if len(control.encode()) > 100:  # AF_UNIX paths are limited to 108 bytes
            control = os.path.join(tempfile.gettempdir(), f"{state.prefix}.sock")
        state.socket = control
        state.save()
        server = ControlServer(control, self.boundaries)
        try:
            if self.tb.trace is not None:  # a second run() on the same testbed starts from the same rates
                for c in self.tb.trace.changes:
                    if c.at == 0:
                        self.tb._apply(c)
            self.t0 = time.monotonic()
            self.record(event="start", run_id=self.tb.run_id)
            self.start_processes(control)
            return self._loop(server)
        except _Stop as stop:
            self.log(f"stopped by signal {signal.Signals(stop.signum).name}; cleaning up")
            return 128 + stop.signum
        finally:
            self.stop_processes()
            server.close()
            if self.events_fh is not None:
                self.record(event="end")
                self.events_fh.close()

    def _loop(self, server: ControlServer) -> int:
        workers = [p for p in self.procs if p.role == "worker"]
        drain_deadline: float | None = None
        while True:
            now = time.monotonic() - self.t0
            while self.time_events and self.time_events[0].at <= now:
                self.fire(self.time_events.pop(0))
            if self.timeout_s is not None and now > self.timeout_s:
                self.log(f"timeout after {self.timeout_s:g} s; stopping all processes")
                return 124
            for p in self.procs:
                rc = p.popen.poll()
                if rc not in (None, 0) and p.role != "flow":
                    self.log(f"{p.label} ({p.role}) exited with code {rc}; stopping the others")
                    return rc if rc > 0 else 128 - rc
            if all(p.popen.poll() == 0 for p in workers):
                others = [p for p in self.procs if p.role in ("server", "scheduler")]
                if all(p.popen.poll() is not None for p in others):
                    return 0
                if drain_deadline is None:
                    drain_deadline = time.monotonic() + PS_DRAIN_S
                elif time.monotonic() > drain_deadline:
                    self.log(f"PS servers/scheduler still running {PS_DRAIN_S:g} s after the workers ended; stopping them")
                    return 0
            wait = 0.1
            if self.time_events:
                wait = max(0.0, min(wait, self.time_events[0].at - now))
            # the server never blocks (non-blocking sends, bounded buffers), so this
            # loop always comes back to the timeout and exit checks above
            readable, writable, _ = select.select(server.fileobjs(), server.writers(), [], wait)
            for f in writable:
                server.handle_write(f)
            for f in readable:
                server.handle(f, self.on_iteration)


def launch(
    command: Sequence[str],
    n_workers: int = 2,
    *,
    bandwidth_mbit: float | None = None,
    up_mbit: float | None = None,
    down_mbit: float | None = None,
    delay_ms: float = 0.0,
    trace: BandwidthTrace | None = None,
    ps: bool = False,
    master_port: int = 29500,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    prefix_output: bool = True,
    events_log: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> int:
    """Create a testbed, run ``command`` on every worker, remove the testbed; return the exit code.

    The arguments are those of :class:`Testbed` and :meth:`Testbed.run`. The
    namespaces are removed however the run ends (success, failure, timeout,
    SIGINT/SIGTERM, an exception in the launcher).
    """
    tb = Testbed(n_workers, bandwidth_mbit=bandwidth_mbit, up_mbit=up_mbit, down_mbit=down_mbit,
                 delay_ms=delay_ms, trace=trace, state_dir=state_dir)
    with stop_on_signals():
        try:
            tb.start()
            return tb.run(command, ps=ps, master_port=master_port, timeout_s=timeout_s, env=env,
                          prefix_output=prefix_output, events_log=events_log)
        except _Stop as stop:
            print(f"[launch] stopped by signal {signal.Signals(stop.signum).name}; cleaning up", file=sys.stderr, flush=True)
            return 128 + stop.signum
        finally:
            tb.stop()

