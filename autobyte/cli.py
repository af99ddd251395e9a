"""The ``autobyte`` command line.

Each subsystem registers its own sub-commands from a ``_cli`` module with a
``register(subparsers)`` function; those modules import frameworks lazily,
inside the command functions, so ``autobyte --help`` stays fast.

Every user error is reported one way, whatever the sub-command: one line on
stderr, ``autobyte COMMAND: error: ARGUMENT must be RULE, but got ARGUMENT=VALUE.``,
and exit status 2, before any long work starts. Argument values are checked
while parsing (the ``*_arg`` converters below); checks that involve several
arguments or files raise :class:`CLIError` at the top of the command.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

#: Modules that contribute sub-commands, in help order.
_CLI_MODULES = (
    "autobyte.sim._cli",
    "autobyte.meta._cli",
    "autobyte.testbed._cli",
    "autobyte.bench._cli",
    "autobyte._advise_cli",
)


class CLIError(Exception):
    """A command-line error: reported as one line, then the process exits with ``code``.

    Args:
        message: what is wrong, naming the argument, its rule and the value received.
        code: exit status; 2 for a user error (the default), 1 for a failure of the run.
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """``argparse`` with one-line errors (no usage dump) and a hint to ``--help``."""

    def error(self, message: str) -> NoReturn:
        # "argument --iters: --iters must be ..." -> "--iters must be ..." (our converters name the flag)
        m = re.match(r"argument (\S+): (.*)", message, re.S)
        if m and m.group(2).startswith(tuple(m.group(1).split("/"))):
            message = m.group(2)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _bad(flag: str, rule: str, text: str, value: Any = None) -> argparse.ArgumentTypeError:
    shown = repr(text) if value is None else repr(value)
    return argparse.ArgumentTypeError(f"{flag} must be {rule}, but got {flag}={shown}.")


def int_arg(flag: str, minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """Converter: an integer in ``[minimum, maximum]``."""
    if maximum is not None:
        rule = f"an integer in [{minimum}, {maximum}]"
    else:
        rule = "a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _bad(flag, rule, text) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise _bad(flag, rule, text, value)
        return value

    convert.__name__ = "int"
    return convert


def float_arg(flag: str, *, minimum: float = 0.0, inclusive: bool = False, maximum: float | None = None,
              unit: str = "") -> Callable[[str], float]:
    """Converter: a finite number above ``minimum`` (or at it, ``inclusive``) and at most ``maximum``."""
    what = f"a number of {unit}" if unit else "a number"
    if maximum is not None:
        rule = f"{what} in {'[' if inclusive else '('}{minimum:g}, {maximum:g}]"
    elif minimum == 0 and not inclusive:
        rule = f"a positive number of {unit}" if unit else "a positive number"
    else:
        rule = f"{what} {'>=' if inclusive else '>'} {minimum:g}"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _bad(flag, rule, text) from None
        low_ok = value >= minimum if inclusive else value > minimum
        if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
            raise _bad(flag, rule, text, value)
        return value

    convert.__name__ = "float"
    return convert


def list_arg(flag: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    """Converter: a comma-separated, non-empty subset of ``choices`` (order kept, duplicates dropped)."""
    rule = f"a comma-separated subset of {','.join(choices)}"

    def convert(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in items if s not in choices]
        if not items or unknown:
            extra = f" ({', '.join(map(repr, unknown))} unknown)" if unknown else ""
            raise argparse.ArgumentTypeError(f"{flag} must be {rule}, but got {flag}={text!r}{extra}.")
        return list(dict.fromkeys(items))

    convert.__name__ = "list"
    return convert


def rates_arg(flag: str) -> Callable[[str], tuple[float, ...]]:
    """Converter: comma-separated positive link rates, Mbit/s."""
    rule = "comma-separated positive numbers of Mbit/s"

    def convert(text: str) -> tuple[float, ...]:
        try:
            rates = tuple(float(r) for r in text.split(",") if r.strip())
        except ValueError:
            raise _bad(flag, rule, text) from None
        if not rates or not all(math.isfinite(r) and r > 0 for r in rates):
            raise _bad(flag, rule, text)
        return rates

    convert.__name__ = "rates"
    return convert


def file_arg(flag: str, *, kind: str = "file") -> Callable[[str], str]:
    """Converter: an existing file (``kind="file"``), folder (``"dir"``) or either (``"any"``)."""
    def convert(text: str) -> str:
        p = Path(text)
        try:
            ok = p.is_file() if kind == "file" else p.is_dir() if kind == "dir" else p.exists()
        except OSError as exc:  # e.g. a folder on the way that this user may not enter
            raise _bad(flag, f"a readable path ({exc.strerror})", text) from None
        if not ok:
            what = {"file": "an existing file", "dir": "an existing folder", "any": "an existing file or folder"}[kind]
            raise _bad(flag, what, text)
        return text

    convert.__name__ = "path"
    return convert


def out_arg(flag: str, *, kind: str = "file", suffix: str | None = None) -> Callable[[str], str]:
    """Converter: where a command writes a file (its folder must exist) or a folder (not an existing file)."""
    def convert(text: str) -> str:
        p = Path(text)
        if not text:
            raise _bad(flag, "a path", text)
        try:
            _check_out(p, text)
        except OSError:  # cannot look (permissions): the command itself reports it, naming the path
            pass
        return text

    def _check_out(p: Path, text: str) -> None:
        if kind == "file":
            if suffix is not None and not text.endswith(suffix):
                raise _bad(flag, f"a file name ending in {suffix}", text)
            if p.is_dir():
                raise _bad(flag, "a file path, not a folder", text)
            if not p.resolve().parent.is_dir():
                raise _bad(flag, "a file in an existing folder", text)
            if not os.access(p.resolve().parent, os.W_OK):
                raise _bad(flag, "a file in a folder you may write to", text)
        elif p.exists() and not p.is_dir():
            raise _bad(flag, "a folder (it exists and is not one)", text)

    convert.__name__ = "path"
    return convert


def _version() -> str:
    from . import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="autobyte", description="AutoByte: ByteScheduler-style gradient scheduling, tuned online by a "
                                                 "meta-network. One sub-command per task; `autobyte COMMAND --help` for each.")
    parser.add_argument("--version", action="version", version=f"autobyte {_version()}", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _CLI_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name in (name, name.rpartition(".")[0]):  # that subsystem has no commands yet
                continue
            raise
        mod.register(sub)
    tag_progs(parser)
    return parser


def tag_progs(parser: argparse.ArgumentParser) -> None:
    """Record every (sub-)parser's name (``autobyte dataset generate``) in the namespace it fills, for error lines."""
    parser.set_defaults(_prog=parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                tag_progs(sp)


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; a :class:`CLIError` becomes one line on stderr and its exit code."""
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"{getattr(args, '_prog', 'autobyte')}: error: {exc}", file=sys.stderr)
        return exc.code


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parsed arguments, or the exit code of ``--help``, ``--version`` or a usage error (already printed)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return dispatch(args)


__all__ = [
    "CLIError", "Parser", "build_parser", "dispatch", "file_arg", "float_arg", "int_arg", "list_arg", "main", "out_arg",
    "parse", "rates_arg", "tag_progs",
]


if __name__ == "__main__":
    # Run the package's module, not this ``__main__`` copy: the sub-commands raise autobyte.cli.CLIError,
    # which the copy's dispatch would not recognise as its own class.
    from autobyte.cli import main as _package_main

    sys.exit(_package_main())
