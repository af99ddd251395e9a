"""``autobyte launch``: run workers in shaped network namespaces; ``--cleanup`` removes leftovers."""

from __future__ import annotations

import argparse
import sys
from typing import Any


_EPILOG = """\
examples:
  autobyte launch -n 2 --bandwidth-mbit 100 -- python train.py
  autobyte launch -n 2 --up-mbit 200 --down-mbit 50 --delay-ms 1 --timeout-s 600 -- python train.py
  autobyte launch -n 2 --trace step:100,2000@20it -- python train.py     (rank 0 calls notify_iteration(k))
  autobyte launch -n 2 --trace walk:50-1000@5s,seed=1 --flow at=10s,src=1,dst=0,s=5 -- python train.py
  autobyte launch -n 2 --ps -- python train_mxnet.py                     (dist_sync: scheduler + 2 servers + 2 workers)
  autobyte launch -n 2 --bandwidth-mbit 1000 --probe-s 3                 (measure the shaped rate)
  autobyte launch --cleanup                                               (remove what killed runs left)
"""


def register(subparsers: Any) -> None:
    from ..cli import int_arg, out_arg

    p = subparsers.add_parser(
        "launch",
        help="run N workers in network namespaces with tc-shaped links (needs root)",
        description="Run N workers in network namespaces with tc-shaped links (a rate, a trace, competing flows); "
                    "--cleanup removes what killed runs left. Needs root. See docs/testbed.md.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--n-workers", type=int_arg("--n-workers", 1, 250), default=2,
                   help="number of workers, one namespace each (default 2)")
    p.add_argument("--bandwidth-mbit", type=float, help="rate of every link, both directions, Mbit/s (default unshaped)")
    p.add_argument("--up-mbit", type=float, help="worker-to-switch rate, Mbit/s (overrides --bandwidth-mbit)")
    p.add_argument("--down-mbit", type=float, help="switch-to-worker rate, Mbit/s (overrides --bandwidth-mbit)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way latency between workers, ms (default 0)")
    p.add_argument("--trace", help="bandwidth trace: FILE.json, const:UP[/DOWN], step:R1,R2@K(it|s)[,n=N], "
                                   "walk:LOW-HIGH@K(it|s)[,seed=S][,factor=F][,n=N]")
    p.add_argument("--flow", action="append", default=[], metavar="at=AT(it|s),src=R,dst=R,s=SEC",
                   help="competing TCP flow from rank src to rank dst, e.g. at=40it,src=1,dst=0,s=5 (repeatable)")
    p.add_argument("--ps", action="store_true", help="also start an MXNet PS scheduler and one server per worker (DMLC_* env)")
    p.add_argument("--master-port", type=int_arg("--master-port", 1, 65535), default=29500, help="MASTER_PORT (default 29500)")
    p.add_argument("--ps-port", type=int_arg("--ps-port", 1, 65535), default=9091, help="DMLC_PS_ROOT_PORT (default 9091)")
    p.add_argument("--timeout-s", type=float, help="stop everything after this many seconds (exit code 124)")
    p.add_argument("--events-log", metavar="PATH", type=out_arg("--events-log"),
                   help="append JSON lines: iteration notices and trace events")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [w0], [w1], ...")
    p.add_argument("--probe-s", type=float, metavar="SECONDS",
                   help="instead of a command, measure the links: odd ranks send to the rank below for SECONDS")
    p.add_argument("--cleanup", nargs="?", const="all", metavar="RUN_ID",
                   help="remove namespaces left by runs whose launcher died (all, or one run id), then exit")
    p.add_argument("--state-dir", type=out_arg("--state-dir", kind="dir"), help="where run state files live (default /run/autobyte)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="command run in every worker namespace (after --)")
    p.set_defaults(func=_main)


def _fail(msg: str, code: int = 2) -> int:
    """Report through the one CLI error path (:class:`autobyte.cli.CLIError`): one line, exit ``code``."""
    from ..cli import CLIError

    raise CLIError(msg, code)


def _main(args: argparse.Namespace) -> int:
    from . import BandwidthTrace, TestbedError, cleanup_runs, launch, parse_flow
    from ._netns import require_root
    from ._trace import check_mbit

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        if args.cleanup is not None:
            if command:
                return _fail("--cleanup takes no command.")
            require_root()
            cleaned, problems = cleanup_runs(args.state_dir, run_id=None if args.cleanup == "all" else args.cleanup)
            for prefix in cleaned:
                print(f"removed testbed run {prefix}")
            for msg in problems:
                print(f"autobyte launch --cleanup: {msg}", file=sys.stderr)
            if not cleaned:
                print("nothing to clean up")
            return 0 if not any("refused" in m or "failed" in m for m in problems) else 1
        for flag in ("bandwidth_mbit", "up_mbit", "down_mbit"):
            v = getattr(args, flag)
            if v is not None:
                check_mbit("--" + flag.replace("_", "-"), v)
        if args.delay_ms < 0:
            return _fail(f"--delay-ms must be >= 0, but got --delay-ms={args.delay_ms!r}.")
        if args.timeout_s is not None and not args.timeout_s > 0:
            return _fail(f"--timeout-s must be a positive number of seconds, but got --timeout-s={args.timeout_s!r}.")
        if args.probe_s is not None:
            if command:
                return _fail("give either --probe-s or a command, not both.")
            if not 0 < args.probe_s <= 600:
                return _fail(f"--probe-s must be in (0, 600] seconds, but got --probe-s={args.probe_s!r}.")
            command = [sys.executable, "-m", "autobyte.testbed._flow", "probe",
                       "--duration-s", str(args.probe_s), "--interval-s", "0.25"]
        if not command:
            return _fail("no command given; usage: autobyte launch [options] -- COMMAND [ARGS...] (or --probe-s / --cleanup).")
        try:
            trace = BandwidthTrace.parse(args.trace) if args.trace else None
        except OSError as exc:
            return _fail(f"--trace file {args.trace!r} cannot be read ({exc.strerror}).")
        flows = [parse_flow(f) for f in args.flow]
        if flows:
            if trace is None:
                up = args.up_mbit if args.up_mbit is not None else args.bandwidth_mbit
                down = args.down_mbit if args.down_mbit is not None else args.bandwidth_mbit
                if up is None or down is None:
                    return _fail("--flow needs shaped links: give --bandwidth-mbit (or --up-mbit and --down-mbit) or --trace.")
                trace = BandwidthTrace.constant(up, down)
                args.bandwidth_mbit = args.up_mbit = args.down_mbit = None
            trace = trace.with_flows(flows)
        return launch(
            command,
            args.n_workers,
            bandwidth_mbit=args.bandwidth_mbit,
            up_mbit=args.up_mbit,
            down_mbit=args.down_mbit,
            delay_ms=args.delay_ms,
            trace=trace,
            ps=args.ps,
            master_port=args.master_port,
            timeout_s=args.timeout_s,
            prefix_output=not args.no_prefix,
            events_log=args.events_log,
            state_dir=args.state_dir,
        )
    except (ValueError, TypeError) as exc:
        return _fail(str(exc))
    except (TestbedError, OSError) as exc:
        return _fail(str(exc), 1)


def main(argv: list[str] | None = None) -> int:
    """``python -m autobyte.testbed._cli ...``: the ``launch`` command alone."""
    from ..cli import Parser, dispatch, parse, tag_progs

    parser = Parser(prog="autobyte")
    register(parser.add_subparsers(dest="command"))
    tag_progs(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(parser, ["launch", *argv])
    return args if isinstance(args, int) else dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
