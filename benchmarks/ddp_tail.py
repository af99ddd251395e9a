"""Where plain DDP's slow iterations come from on a 2-core host (issue 15, item 4).

    python benchmarks/ddp_tail.py [--rounds 4] [--iters 15] [--mbit R] [--no-lightning]

Two workers in network namespaces (as root; unshaped unless ``--mbit``),
the benchmark CNN, batch 16. Part 1 runs plain PyTorch in the same two
processes, interleaved round by round: DDP and the scheduled engine at
ByteScheduler's default <4 MB, 4X>, each with 1 and with 2 intra-op threads
per worker. For every iteration it records the wall time and the time the
process's threads spent *runnable but waiting for a CPU* (the run-queue
delay from ``/proc/self/task/*/schedstat``): CPU contention shows there and
nowhere else. Part 2 runs the demo's Lightning job (``lightning_job``) as
the demo did before this fix (Lightning picks the thread count) and with one
thread per worker, DDP and the engine.

Rank 0 prints one JSON line per mode; the table gives median, p90 and max
seconds per iteration and the median run-queue delay per iteration.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def _runqueue_s() -> float:
    """Seconds this process's threads have waited on a run queue so far."""
    total = 0
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended between glob and open
    return total / 1e9


def _rank(opts: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from autobyte.integrations.torch import schedule
    from autobyte.bench.models import make_cnn, synthetic_batches

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = synthetic_batches(8, 16, rank)
    runners = []
    for method, threads in opts["modes"]:
        model = make_cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if method in ("ddp", "ddp+bcast"):
            runners.append((method, threads, torch.nn.parallel.DistributedDataParallel(model), opt, lambda: None))
        else:
            h = schedule(model, opt, partition_bytes=4_000_000, credit_bytes=16_000_000)
            runners.append((method, threads, model, opt, h.synchronize))

    flag = torch.zeros(1, dtype=torch.int32)

    def run(method: str, net: Any, opt: Any, finish: Any, threads: int, n: int) -> list[list[float]]:
        torch.set_num_threads(threads)
        dist.barrier()
        rows = []
        for i in range(n):
            t0, q0 = time.perf_counter(), _runqueue_s()
            if method == "ddp+bcast":
                dist.broadcast(flag, 0)  # what Lightning's _broadcast_sigterm_tensor does every step
            x, y = data[i % len(data)]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            rows.append([time.perf_counter() - t0, _runqueue_s() - q0])
        finish()
        return rows

    for method, threads, net, opt, finish in runners:
        run(method, net, opt, finish, threads, 3)
    got: dict[int, list[list[float]]] = {i: [] for i in range(len(runners))}
    for _ in range(int(opts["rounds"])):
        for i, (method, threads, net, opt, finish) in enumerate(runners):
            got[i] += run(method, net, opt, finish, threads, int(opts["iters"]))
    if rank == 0:
        for i, (method, threads, *_rest) in enumerate(runners):
            print(json.dumps({"job": "torch", "method": method, "threads": threads, "rows": got[i]}), flush=True)
    dist.destroy_process_group()


def _stats(secs: list[float]) -> tuple[float, float, float]:
    s = sorted(secs)
    return statistics.median(s), s[min(len(s) - 1, int(0.9 * len(s)))], s[-1]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        _rank(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iters", type=int, default=15, help="iterations per mode per round (part 1)")
    ap.add_argument("--lightning-iters", type=int, default=60, help="iterations of each Lightning run (part 2)")
    ap.add_argument("--mbit", type=float, default=None, help="shape the link to this rate (default: unshaped)")
    ap.add_argument("--no-lightning", action="store_true", help="part 1 only")
    ap.add_argument("--modes", default="ddp:1,engine:1,ddp:2,engine:2", help="part 1's method:threads list; methods: ddp, "
                    "ddp+bcast (DDP plus a 1-element broadcast at every step, as Lightning does), engine")
    args = ap.parse_args()

    from autobyte.testbed import Testbed

    env = {"PYTHONWARNINGS": "ignore"}
    print(f"uptime: {open('/proc/loadavg').read().split()[:3]}")
    modes = [[m.split(":")[0], int(m.split(":")[1])] for m in args.modes.split(",")]
    buf = io.StringIO()
    with Testbed(2, bandwidth_mbit=args.mbit) as tb:
        opts = {"modes": modes, "rounds": args.rounds, "iters": args.iters}
        rc = tb.run([sys.executable, os.path.abspath(__file__), "--rank", json.dumps(opts)], timeout_s=1200, env=env, stdout=buf)
    if rc != 0:
        print(buf.getvalue()[-4000:], file=sys.stderr)
        return 1
    results = [json.loads(line.split("] ", 1)[-1]) for line in buf.getvalue().splitlines() if "] {" in line]

    if not args.no_lightning:
        with tempfile.TemporaryDirectory() as tmp:
            for method in ("ddp", "static"):
                for threads in (None, 1):
                    out = os.path.join(tmp, f"{method}-{threads}")
                    spec: dict[str, Any] = {"method": method, "iters": args.lightning_iters, "threads": threads,
                                            "config": [4_000_000, 16_000_000]}
                    with Testbed(2, bandwidth_mbit=args.mbit) as tb:
                        rc = tb.run([sys.executable, "-m", "autobyte.bench.lightning_job", json.dumps(spec), out],
                                    timeout_s=1200, env=env, stdout=io.StringIO())
                    if rc != 0:
                        print(f"lightning job {method} threads={threads} failed ({rc})", file=sys.stderr)
                        return 1
                    with open(os.path.join(out, "iterations.jsonl")) as f:
                        rows = [json.loads(line) for line in f][3:]
                    results.append({"job": "lightning", "method": "engine" if method == "static" else method,
                                    "threads": rows[0].get("threads"), "threads_set_by": "Lightning" if threads is None else "us",
                                    "rows": [[r["seconds"], None] for r in rows]})

    print(f"link: {'unshaped' if args.mbit is None else f'{args.mbit:g} Mbit/s'}; uptime after: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    print("| job | method | intra-op threads per worker | median s/it | p90 | max | run-queue wait per it (median) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in results:
        med, p90, mx = _stats([x[0] for x in r["rows"]])
        waits = [x[1] for x in r["rows"] if x[1] is not None]
        wait = f"{statistics.median(waits) * 1000:.0f} ms" if waits else "-"
        who = f" (set by {r['threads_set_by']})" if "threads_set_by" in r else ""
        label = "plain PyTorch" if r["job"] == "torch" else "Lightning"
        print(f"| {label} | {r['method']} | {r['threads']}{who} | {med:.3f} | {p90:.3f} | {mx:.3f} | {wait} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
