"""The control channel: notify_iteration and the launcher's server, over a real Unix socket."""

from __future__ import annotations

import select
import threading
import time
import warnings

import pytest

from autobyte.testbed import _control
from autobyte.testbed import notify_iteration
from autobyte.testbed._control import ENV_VAR, ControlServer


def test_notify_is_a_noop_outside_the_testbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    _control._reset_client()
    notify_iteration(0)
    notify_iteration(1)
    assert _control._client is None


@pytest.mark.parametrize("k", [-1, 1.0, "3", True])
def test_notify_rejects_bad_iteration(k: object) -> None:
    with pytest.raises(ValueError, match=r"k must be an iteration number \(an integer >= 0\), but got k="):
        notify_iteration(k)  # type: ignore[arg-type]


def test_notify_waits_for_the_reshape_at_boundaries(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "c.sock")
    server = ControlServer(path, boundaries=[3, 6])
    seen: list[tuple[int, float]] = []
    stop = threading.Event()

    def on_iteration(k: int) -> None:
        if k in (3, 6):
            time.sleep(0.2)  # a slow "tc change": the client must wait for it
        seen.append((k, time.monotonic()))

    def serve() -> None:
        while not stop.is_set():
            r, _, _ = select.select(server.fileobjs(), [], [], 0.05)
            for f in r:
                server.handle(f, on_iteration)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    monkeypatch.setenv(ENV_VAR, path)
    _control._reset_client()
    try:
        returned = {}
        for k in range(8):
            notify_iteration(k)
            returned[k] = time.monotonic()
        # a boundary returns only after the launcher handled it
        handled = dict(seen)
        assert returned[3] >= handled[3] and returned[6] >= handled[6]
        # skipping past a boundary (5 -> 7 with 6 unseen) also waits: test with a fresh client
        _control._reset_client()
        seen.clear()
        notify_iteration(2)
        notify_iteration(7)
        t7 = time.monotonic()
        assert dict(seen).get(7, float("inf")) <= t7
    finally:
        _control._reset_client()
        stop.set()
        th.join(2)
        server.close()


def test_notify_warns_once_when_the_launcher_is_gone(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.sock"))
    _control._reset_client()
    with pytest.warns(RuntimeWarning, match=r"control channel .* failed"):
        notify_iteration(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        notify_iteration(1)  # disabled now: no second warning, no error
    _control._reset_client()
