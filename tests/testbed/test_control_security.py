"""The launcher's control socket: its owner only, and no client can stall the launcher's loop."""

from __future__ import annotations

import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autobyte.testbed import _control
from autobyte.testbed._control import ENV_VAR, MAX_CLIENTS, ControlServer, notify_iteration

from .conftest import launch, needs_root


class Loop:
    """The launcher's loop in miniature: select, serve, and count its turns (a stalled loop stops counting)."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.turns = 0
        self.seen: list[int] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            r, w, _ = select.select(self.server.fileobjs(), self.server.writers(), [], 0.05)
            for f in w:
                self.server.handle_write(f)
            for f in r:
                self.server.handle(f, self.seen.append)
            self.turns += 1

    def responsive(self, within_s: float = 2.0) -> bool:
        before = self.turns
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.turns >= before + 3:
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the server loop is stuck"


@pytest.fixture
def served(tmp_path: Path):
    server = ControlServer(str(tmp_path / "c.sock"), boundaries=[5])
    loop = Loop(server)
    yield server, loop
    loop.stop()
    server.close()
    _control._reset_client()


def connect(path: str) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(path)
            return s
        except BlockingIOError:  # the listen backlog is full for a moment (a loaded machine): retry
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def well_behaved_client_works(path: str, monkeypatch: pytest.MonkeyPatch, seen: list[int]) -> None:
    monkeypatch.setenv(ENV_VAR, path)
    _control._reset_client()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed channel warns: make it fail the test
        for k in range(8):
            notify_iteration(k)  # waits for the acknowledgement at 5
    deadline = time.monotonic() + 5
    while 7 not in seen and time.monotonic() < deadline:  # 6 and 7 are fire and forget
        time.sleep(0.02)
    assert 5 in seen and 7 in seen


@pytest.mark.integration
def test_socket_is_its_owners_only() -> None:
    d = tempfile.mkdtemp(prefix="autobyte-ctl-")  # a folder anyone may traverse: only the socket's mode guards it
    os.chmod(d, 0o755)
    server = ControlServer(os.path.join(d, "c.sock"), boundaries=[])
    try:
        mode = stat.S_IMODE(os.stat(server.path).st_mode)
        assert mode == 0o600, oct(mode)
        other_python = shutil.which("python3", path="/usr/bin:/bin")
        if os.geteuid() == 0 and other_python:  # another user really cannot connect...
            probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                     "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\nsys.exit(0)\n")

            def as_nobody() -> int:
                return subprocess.run([other_python, "-c", probe, server.path], user="nobody", timeout=30).returncode

            assert as_nobody() == 13
            os.chmod(server.path, 0o666)  # ...and could with the old mode: the probe can tell
            assert as_nobody() == 0
    finally:
        server.close()
        shutil.rmtree(d, ignore_errors=True)


def test_a_client_that_never_reads_its_acks_is_dropped_not_waited_for(served, monkeypatch) -> None:
    server, loop = served
    bad = connect(server.path)
    bad.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    bad.settimeout(0.5)
    # ask for acknowledgements as fast as possible and never read one
    sent = 0
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and server.n_dropped == 0:
            try:
                sent += bad.send(b"5?\n" * 4096)
            except (socket.timeout, BlockingIOError):
                pass
            except OSError:
                break  # the launcher closed it
    finally:
        bad.close()
    assert server.n_dropped >= 1 and sent > 0
    assert loop.responsive()
    well_behaved_client_works(server.path, monkeypatch, loop.seen)


@pytest.mark.parametrize("payload", [b"x" * 100_000, b"9" * 5000 + b"?\n", b"\xff\xfe garbage \x00\n" * 100 + b"-3?\n"],
                         ids=["endless-line", "huge-number", "garbage"])
def test_garbage_and_endless_lines_never_stall_the_loop(served, monkeypatch, payload: bytes) -> None:
    server, loop = served
    bad = connect(server.path)
    try:
        bad.sendall(payload)
        assert loop.responsive()
    finally:
        bad.close()
    assert loop.responsive()
    assert not any(k < 0 or k > 10**6 for k in loop.seen)
    well_behaved_client_works(server.path, monkeypatch, loop.seen)


def test_a_flood_of_connections_is_capped(served, monkeypatch) -> None:
    server, loop = served
    socks = []
    for _ in range(MAX_CLIENTS + 20):
        socks.append(connect(server.path))
        time.sleep(0.002)
    try:
        deadline = time.monotonic() + 10
        while server.n_dropped < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.conns) <= MAX_CLIENTS and server.n_dropped >= 20
        assert loop.responsive()
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while server.conns and time.monotonic() < deadline:  # the launcher notices the closes
        time.sleep(0.05)
    well_behaved_client_works(server.path, monkeypatch, loop.seen)


HOSTILE = """
import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["AUTOBYTE_TESTBED_CONTROL"])
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.settimeout(1.0)
end = time.monotonic() + 60
while time.monotonic() < end:   # demand acknowledgements, never read them
    try:
        s.send(b"1?\\n" * 4096)
    except socket.timeout:
        pass
    except OSError:
        time.sleep(60)  # dropped by the launcher: linger, so only --timeout-s ends the run
"""


@needs_root[0]
@needs_root[1]
@needs_root[2]
def test_launcher_enforces_its_timeout_despite_a_hostile_client(state_dir: Path) -> None:
    t0 = time.monotonic()
    try:
        r = launch("-n", "2", "--timeout-s", "4", "--trace", "step:100,200@1it", "--", sys.executable, "-c", HOSTILE,
                   state_dir=state_dir, timeout=60)
    except subprocess.TimeoutExpired:
        launch("--cleanup", state_dir=state_dir)  # the stalled launcher was killed: remove its namespaces
        pytest.fail("the launcher did not enforce --timeout-s 4 within 60 s")
    assert r.returncode == 124 and "timeout after 4 s" in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - t0 < 30
    assert not list(state_dir.iterdir())
