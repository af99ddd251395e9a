"""Test helper run by ``autobyte launch --ps``: one MXNet ``dist_sync`` push/pull.

Servers and the scheduler run this same file: ``import mxnet`` serves and exits
for them (MXNet's convention). Each worker pushes ``rank + 1``; the pulled sum
must be ``n (n + 1) / 2``.
"""

from __future__ import annotations

import json
import os
import sys

import mxnet as mx


def main() -> int:
    kv = mx.kv.create("dist_sync")
    n = kv.num_workers
    kv.init(7, mx.nd.zeros((1024,)))
    kv.push(7, mx.nd.ones((1024,)) * (kv.rank + 1))
    out = mx.nd.zeros((1024,))
    kv.pull(7, out=out)
    ok = bool((out.asnumpy() == n * (n + 1) / 2).all())
    print(json.dumps({"ok": ok, "rank": kv.rank, "num_workers": n, "role": os.environ.get("DMLC_ROLE")}), flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
