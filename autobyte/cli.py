"""The ``autobyte`` command line.

Each subsystem registers its own sub-commands from a ``_cli`` module with a
``register(subparsers)`` function; those modules import frameworks lazily,
inside the command functions, so ``autobyte --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

#: Modules that contribute sub-commands, in help order.
_CLI_MODULES = (
    "autobyte.sim._cli",
    "autobyte.meta._cli",
    "autobyte.testbed._cli",
    "autobyte.bench._cli",
    "autobyte._advise_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autobyte", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _CLI_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name in (name, name.rpartition(".")[0]):  # that subsystem has no commands yet
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
