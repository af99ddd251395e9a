"""Test helper run by ``autobyte launch`` on 2 workers: timed transfers per iteration.

Rank 1 notifies the testbed of each iteration, sends ``CHUNK`` bytes to rank 0
and waits for a 1-byte acknowledgement; rank 0 prints one JSON line with the
Mbit/s of every iteration.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from autobyte.testbed import notify_iteration

CHUNK = int(sys.argv[1]) if len(sys.argv) > 1 else 400_000
N_ITERS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
PORT = 6100


def main() -> int:
    rank = int(os.environ["RANK"])
    if rank == 0:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((os.environ["MASTER_ADDR"], PORT))
        srv.listen(1)
        srv.settimeout(30)
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        for _ in range(N_ITERS):
            got = 0
            while got < CHUNK:
                k = conn.recv_into(buf, min(len(buf), CHUNK - got))
                if not k:
                    return 1
                got += k
            conn.sendall(b"!")
        return 0
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((os.environ["MASTER_ADDR"], PORT), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = b"\0" * CHUNK
    rates = []
    for k in range(N_ITERS):
        notify_iteration(k)
        t0 = time.perf_counter()
        conn.sendall(payload)
        if conn.recv(1) != b"!":
            return 1
        rates.append(CHUNK * 8 / (time.perf_counter() - t0) / 1e6)
    print(json.dumps({"mbit_per_iter": rates}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
