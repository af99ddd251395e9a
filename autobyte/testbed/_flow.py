"""Bulk TCP flows between namespaces: competing traffic and link probes.

Run inside a namespace by the launcher::

    python -m autobyte.testbed._flow serve --port P --max-s S
    python -m autobyte.testbed._flow send --host H --port P --duration-s S
    python -m autobyte.testbed._flow probe --duration-s S [--interval-s I]

``probe`` is what ``autobyte launch --probe-s S`` runs on every worker: each
odd rank sends to the rank below it for ``S`` seconds and the receiver prints
one JSON line ``{"probe": ..., "mbit": ..., "series": [[t, mbit], ...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

CHUNK = 1 << 20
PROBE_PORT = 5200


def receive(port: int, *, max_s: float, interval_s: float = 0.0, bind: str = "0.0.0.0") -> dict[str, object]:
    """Accept one connection on ``port`` and count bytes until EOF or ``max_s``."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(max_s)
    try:
        conn, peer = srv.accept()
    except socket.timeout:
        srv.close()
        return {"peer": None, "bytes": 0, "seconds": 0.0, "mbit": 0.0, "series": []}
    conn.settimeout(max(1.0, max_s))
    buf = bytearray(CHUNK)
    total = 0
    t0 = t_last = time.perf_counter()
    n_last = 0
    series: list[list[float]] = []
    deadline = t0 + max_s
    first = None
    try:
        while time.perf_counter() < deadline:
            k = conn.recv_into(buf)
            if not k:
                break
            now = time.perf_counter()
            if first is None:
                first = now
                t_last = now
            total += k
            if interval_s > 0 and now - t_last >= interval_s:
                series.append([round(now - first, 4), round((total - n_last) * 8 / (now - t_last) / 1e6, 2)])
                t_last, n_last = now, total
    except socket.timeout:
        pass
    finally:
        conn.close()
        srv.close()
    elapsed = time.perf_counter() - (first or t0)
    first_wall = time.time() - (time.perf_counter() - (first or t0))
    return {"peer": peer[0], "bytes": total, "seconds": round(elapsed, 4), "start_wall": round(first_wall, 4),
            "mbit": round(total * 8 / elapsed / 1e6, 2) if elapsed > 0 else 0.0, "series": series}


def send(host: str, port: int, *, duration_s: float, connect_timeout_s: float = 10.0) -> int:
    """Connect (retrying while the receiver starts) and send as fast as possible for ``duration_s``."""
    deadline = time.monotonic() + connect_timeout_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=2.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.settimeout(max(5.0, duration_s))
    payload = b"\0" * CHUNK
    sent = 0
    end = time.perf_counter() + duration_s
    try:
        while time.perf_counter() < end:
            sent += conn.send(payload)
    except OSError:
        pass
    conn.close()
    return sent


def _probe(duration_s: float, interval_s: float) -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    addr_of = os.environ["AUTOBYTE_TESTBED_ADDRS"].split(",")
    if rank % 2 == 1:
        send(addr_of[rank - 1], PROBE_PORT, duration_s=duration_s)
    elif rank + 1 < world:
        res = receive(PROBE_PORT, max_s=duration_s + 10.0, interval_s=interval_s)
        res = {"probe": f"{rank + 1}->{rank}", **res}
        print(json.dumps(res), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autobyte.testbed._flow")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--max-s", type=float, required=True)
    s.add_argument("--label", default="flow")
    c = sub.add_parser("send")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--duration-s", type=float, required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("--duration-s", type=float, required=True)
    pr.add_argument("--interval-s", type=float, default=0.0)
    a = p.parse_args(argv)
    if a.cmd == "serve":
        res = receive(a.port, max_s=a.max_s)
        res.pop("series")
        print(json.dumps({a.label: res}), flush=True)
    elif a.cmd == "send":
        send(a.host, a.port, duration_s=a.duration_s)
    else:
        return _probe(a.duration_s, a.interval_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
