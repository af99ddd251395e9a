"""Test helper run in one worker namespace: bulk TCP both ways with the peer, progress as JSON lines.

``python _bulk_pair.py MY_ADDR PEER_ADDR N_CONNS PORT`` listens on ``N_CONNS``
ports from ``PORT``, opens ``N_CONNS`` connections to the peer's ports and
writes 4 MB messages on each (gloo-sized) until killed. Every 0.1 s it prints
``{"recv": [bytes received on each connection]}``.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

MESSAGE = b"\0" * 4_000_000


def main() -> int:
    me, peer, n_conns, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    received = [0] * n_conns

    def serve(i: int, srv: socket.socket) -> None:
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        while True:
            k = conn.recv_into(buf)
            if not k:
                return
            received[i] += k

    def send(i: int) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection((peer, port + i), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.settimeout(None)
        while True:
            conn.sendall(MESSAGE)

    for i in range(n_conns):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((me, port + i))
        srv.listen(1)
        threading.Thread(target=serve, args=(i, srv), daemon=True).start()
    for i in range(n_conns):
        threading.Thread(target=send, args=(i,), daemon=True).start()
    while True:
        time.sleep(0.1)
        print(json.dumps({"recv": received}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
