"""Every sub-command refuses bad arguments the same way: one line naming the argument, exit 2, no work done.

Calls ``autobyte.cli.main`` in-process: validation must fail before any long
work (a simulation, a training job, a testbed), so each case takes a fraction
of a second; a case that started real work would blow the per-case bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autobyte.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Bad inputs on disk: a plain file, a truncated dataset, a file that is no dataset, bad traces, bad weights."""
    from autobyte.meta._data import generate

    d = tmp_path_factory.mktemp("cli")
    plain = d / "plain.txt"
    plain.write_text("not a folder\n")
    good = d / "good.npz"
    generate(2, models=["alexnet"], n_candidates=2, n_iters=2).save(good)
    truncated = d / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    notnpz = d / "notdata.npz"
    notnpz.write_bytes(b"PK\x03\x04 garbage")
    latin = d / "latin1.json"
    latin.write_bytes('{"changes": [{"at": 0, "up_mbit": 100}], "note": "d\xe9bit"}'.encode("latin-1"))
    backwards = d / "backwards.json"
    backwards.write_text(json.dumps({"changes": [{"at": 0, "up_mbit": 100}, {"at": 20, "up_mbit": 50},
                                                 {"at": 10, "up_mbit": 200}]}))
    empty = d / "empty"
    empty.mkdir()
    return {"dir": str(d), "plain": str(plain), "good": str(good), "truncated": str(truncated), "notnpz": str(notnpz),
            "latin": str(latin), "backwards": str(backwards), "empty": str(empty), "missing": str(d / "missing"),
            "nodir_npz": str(d / "no" / "x.npz")}


# (argv, text the one error line must hold); {name} is replaced by files[name]
CASES: list[tuple[list[str], str]] = [
    # top level
    ([], ""),
    (["nosuch"], "invalid choice: 'nosuch'"),
    # simulate
    (["simulate", "--model", "nope"], "--model must be one of"),
    (["simulate", "--workers", "0"], "--workers must be an integer in [1, 4096], but got --workers=0."),
    (["simulate", "--workers", "two"], "--workers must be an integer in [1, 4096], but got --workers='two'."),
    (["simulate", "--arch", "ring"], "argument --arch: invalid choice: 'ring'"),
    (["simulate", "--bandwidth-gbps", "0"], "--bandwidth-gbps must be a positive number of Gbit/s, but got --bandwidth-gbps=0.0."),
    (["simulate", "--bandwidth-gbps", "nan"], "--bandwidth-gbps must be a positive number of Gbit/s"),
    (["simulate", "--partition-bytes", "0"], "--partition-bytes must be a positive integer, but got --partition-bytes=0."),
    (["simulate", "--partition-bytes", "4MB"], "--partition-bytes must be a positive integer, but got --partition-bytes='4MB'."),
    (["simulate", "--credit-bytes", "-1"], "--credit-bytes must be a positive integer"),
    (["simulate", "--iters", "0"], "--iters must be an integer in [1, 100000]"),
    (["simulate", "--seed", "-1"], "--seed must be an integer in [0, 4294967295]"),
    (["simulate", "--seed", "4294967296"], "--seed must be an integer in [0, 4294967295], but got --seed=4294967296."),
    (["simulate", "--latency-us", "-1"], "--latency-us must be a number of microseconds >= 0"),
    (["simulate", "--per-message-us", "inf"], "--per-message-us must be a number of microseconds >= 0"),
    # dataset
    (["dataset"], "give an action: autobyte dataset generate"),
    (["dataset", "generate", "--contexts", "8"], "the following arguments are required: --out"),
    (["dataset", "generate", "--out", "{dir}/m.npz", "--contexts", "0"], "--contexts must be an integer in [1, 10000000], but got --contexts=0."),
    (["dataset", "generate", "--out", "{dir}/m.npz", "--candidates", "1"], "--candidates must be an integer in [2, 10000]"),
    (["dataset", "generate", "--out", "{dir}/m.npz", "--seed", "-3"], "--seed must be an integer in [0, 4294967295]"),
    (["dataset", "generate", "--out", "{dir}/m.txt"], "--out must be a file name ending in .npz"),
    (["dataset", "generate", "--out", "{nodir_npz}"], "--out must be a file in an existing folder"),
    (["dataset", "generate", "--out", "{dir}"], "--out must be a file name ending in .npz"),
    # train-meta
    (["train-meta", "--data", "{missing}", "--out", "{dir}/n.npz"], "--data must be an existing file or folder"),
    (["train-meta", "--data", "{truncated}", "--out", "{dir}/n.npz"], "{truncated}"),
    (["train-meta", "--data", "{notnpz}", "--out", "{dir}/n.npz"], "{notnpz}"),
    (["train-meta", "--data", "{plain}", "--out", "{dir}/n.npz"], "{plain}"),
    (["train-meta", "--data", "{empty}", "--out", "{dir}/n.npz"], "--data must be a .npz of `autobyte dataset generate` or a folder of them"),
    (["train-meta", "--data", "{good}", "--out", "{dir}/n.h5"], "--out must be a file name ending in .npz"),
    (["train-meta", "--data", "{good}", "--out", "{dir}/n.npz", "--epochs", "0"], "--epochs must be an integer in [1, 100000]"),
    (["train-meta", "--data", "{good}", "--out", "{dir}/n.npz", "--batch-size", "0"], "--batch-size must be an integer in [1, 1048576]"),
    (["train-meta", "--data", "{good}", "--out", "{dir}/n.npz", "--seed", "-1"], "--seed must be an integer in [0, 4294967295]"),
    (["train-meta", "--data", "{good}", "--out", "{dir}/n.npz", "--report", "{nodir_npz}"], "--report must be a file in an existing folder"),
    # launch (as root, a valid command would really run: every case here is refused first)
    (["launch", "-n", "0", "--", "true"], "--n-workers must be an integer in [1, 250], but got --n-workers=0."),
    (["launch", "--master-port", "0", "--", "true"], "--master-port must be an integer in [1, 65535]"),
    (["launch", "--ps-port", "70000", "--", "true"], "--ps-port must be an integer in [1, 65535]"),
    (["launch", "--bandwidth-mbit", "0", "--", "true"], "--bandwidth-mbit must be a positive number of Mbit/s, but got --bandwidth-mbit=0.0."),
    (["launch", "--bandwidth-mbit", "fast", "--", "true"], "argument --bandwidth-mbit: invalid float value: 'fast'"),
    (["launch", "--delay-ms", "-1", "--", "true"], "--delay-ms must be >= 0"),
    (["launch", "--timeout-s", "0", "--", "true"], "--timeout-s must be a positive number of seconds"),
    (["launch", "--probe-s", "0"], "--probe-s must be in (0, 600] seconds"),
    (["launch", "--trace", "step:100,fast@2it", "--", "true"], "bad trace 'step:100,fast@2it'"),
    (["launch", "--trace", "{latin}", "--", "true"], "trace file '{latin}' is not UTF-8 text"),
    (["launch", "--trace", "{backwards}", "--", "true"], "rate changes must be in time order, but change 2 (at=10 it) comes after change 1 (at=20 it)"),
    (["launch", "--trace", "{missing}.json", "--", "true"], "{missing}.json"),
    (["launch", "--flow", "at=1s,src=0,dst=0,s=1", "--bandwidth-mbit", "5", "--", "true"], "src and dst must be different ranks"),
    (["launch", "--events-log", "{nodir_npz}", "--", "true"], "--events-log must be a file in an existing folder"),
    (["launch", "--state-dir", "{plain}", "--", "true"], "--state-dir must be a folder"),
    (["launch"], "no command given"),
    # bench
    (["bench", "--methods", "ddp,nosuch"], "--methods must be a comma-separated subset of ddp,bytescheduler,bo,autobyte,oracle "
     "(with --arch ps: dist_sync,bytescheduler,bo,hindsight,autobyte,oracle), but got --methods='ddp,nosuch' ('nosuch' unknown)."),
    (["bench", "--arch", "mesh"], "--arch must be one of allreduce, ps, but got --arch='mesh'."),
    (["bench", "--arch", "ps", "--methods", "dist_sync,ddp"], "--methods ddp does not exist with --arch ps (its methods: "
     "dist_sync,bytescheduler,bo,hindsight,autobyte,oracle), but got --methods='dist_sync,ddp'."),
    (["bench", "--methods", "dist_sync"], "--methods dist_sync does not exist with --arch allreduce"),
    (["bench", "--model", "resnet"], "--model must be cnn or emu:NAME (a zoo model), but got --model='resnet'."),
    (["bench", "--arch", "ps", "--model", "emu:nosuch"], "--model 'emu:nosuch': name must be one of"),
    (["bench", "--model", "emu:resnet50"], "--model emu:resnet50 (emulated compute) runs with --arch ps here, but got --arch='allreduce'."),
    (["bench", "--suite", "quick", "--arch", "ps"], "--suite runs each scenario on the architecture and model it names (--suite paper-ps on a parameter server), but got --arch='ps'"),
    (["bench", "--arch", "ps", "--compute-scale", "0"], "--compute-scale must be a number"),
    (["bench", "--methods", ""], "--methods must be a comma-separated subset"),
    (["bench", "--low-mbit", "0"], "--low-mbit must be a number of Mbit/s in (0, 1e+06], but got --low-mbit=0.0."),
    (["bench", "--high-mbit", "100"], "--high-mbit must be above --low-mbit, but got --low-mbit=200.0, --high-mbit=100.0."),
    (["bench", "--every", "0"], "--every must be an integer in [1, 1000000]"),
    (["bench", "--iters", "0"], "--iters must be an integer in [1, 10000000]"),
    (["bench", "--bo-iters", "0"], "--bo-iters must be an integer in [1, 1000000]"),
    (["bench", "--grid-iters", "-2"], "--grid-iters must be an integer in [1, 100000]"),
    (["bench", "--out", "{plain}"], "--out must be a folder"),
    # demo
    (["demo", "--tuner", "fastest"], "--tuner must be one of autobyte, bo, grid, static, but got --tuner='fastest'."),
    # advise
    (["advise", "--workers", "1"], "--workers must be an integer >= 2, but got --workers=1."),
    (["demo", "--rounds", "0"], "--rounds must be an integer in [1, 1000], but got --rounds=0."),
    (["demo", "--iters", "0"], "--iters must be an integer in [1, 10000000], but got --iters=0."),
    (["demo", "--every", "0"], "--every must be an integer in [1, 1000000]"),
    (["demo", "--low-mbit", "-1"], "--low-mbit must be a number of Mbit/s in (0, 1e+06]"),
    (["demo", "--high-mbit", "10"], "--high-mbit must be above --low-mbit"),
    (["demo", "--out", "{plain}"], "--out must be a folder"),
    (["demo", "--methods", "ddp,ddp_fp16"], "--methods must be a comma-separated subset of ddp,bytescheduler,autobyte,"
                                            "ddp_hook,autobyte_wire, but got --methods='ddp,ddp_fp16' ('ddp_fp16' unknown)."),
    (["demo", "--methods", ","], "--methods must be a comma-separated subset of ddp,"),
    (["demo", "--methods", "ddp_hook,autobyte_wire"], "--methods must include ddp (every speed-up is over plain DDP in the "
                                                      "same round), but got --methods='ddp_hook,autobyte_wire'."),
]


def _fill(text: str, files: dict[str, str]) -> str:
    return text.format(**files)


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_bad_argument_is_one_line_and_exit_2(argv: list[str], message: str, files: dict[str, str],
                                             capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = [_fill(a, files) for a in argv]
    if argv[:1] == ["launch"]:
        argv = ["launch", "--state-dir", str(tmp_path), *argv[1:]] if "--state-dir" not in argv else argv
    t0 = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    if argv:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"autobyte {argv[0]}" if argv[0] != "nosuch" else "autobyte: error: "), lines[0]
        assert ": error: " in lines[0]
        assert _fill(message, files) in lines[0], lines[0]
    assert took < 10, f"{argv} took {took:.1f} s: validation must fail before any work"
    if argv[:1] == ["launch"]:
        assert not [p for p in tmp_path.iterdir() if p.suffix in (".json", ".sock")]  # no testbed was created


def test_every_subcommand_has_a_bad_value_case() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    covered = {argv[0] for argv, _ in CASES if argv}
    assert set(sub.choices) <= covered, set(sub.choices) - covered  # type: ignore[union-attr]


def test_every_option_has_help_text() -> None:
    def walk(p, path):
        for a in p._actions:
            if a.dest in ("help", "version"):
                continue
            if a.choices and hasattr(a, "_name_parser_map"):
                for name, sp in a.choices.items():
                    yield from walk(sp, path + [name])
                continue
            yield path, a

    missing = [f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}" for path, a in walk(build_parser(), ["autobyte"])
               if not a.help]
    assert not missing


def test_every_command_says_what_it_is_for_in_one_line() -> None:
    # `autobyte --help` lists each command with one line; `autobyte X --help` opens with what X is for
    def walk(p: Any, path: list[str]) -> Any:
        for a in p._actions:
            if hasattr(a, "_name_parser_map"):
                helps = {c.dest: c.help for c in a._choices_actions}
                for name, sp in a.choices.items():
                    yield [*path, name], helps.get(name), sp.description
                    yield from walk(sp, [*path, name])

    commands = list(walk(build_parser(), ["autobyte"]))
    assert {" ".join(c) for c, _, _ in commands} >= {"autobyte simulate", "autobyte dataset generate", "autobyte train-meta",
                                                     "autobyte launch", "autobyte bench", "autobyte demo", "autobyte advise"}
    for path, line, description in commands:
        name = " ".join(path)
        assert line and "\n" not in line and len(line) <= 100, (name, line)
        assert description and description[0].isupper() and "``" not in description, (name, description)


@pytest.mark.integration
def test_version() -> None:
    import autobyte

    r = subprocess.run([sys.executable, "-m", "autobyte.cli", "--version"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"autobyte {autobyte.__version__}"


@pytest.mark.integration
@pytest.mark.parametrize("argv", [["demo", "--tuner", "fastest"], ["dataset", "generate", "--out", "x.npz", "--contexts", "0"],
                                  ["bench", "--methods", "ddp,nosuch"]])
def test_as_a_process_no_traceback(argv: list[str]) -> None:
    # the reported cases, through the real entry point: one line on stderr, exit 2, nothing on stdout
    r = subprocess.run([sys.executable, "-m", "autobyte.cli", *argv], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not r.stdout, r.stderr


def test_the_dataset_loader_names_the_file(files: dict[str, str]) -> None:
    from autobyte.meta._data import MetaDataset

    for bad in ("truncated", "notnpz"):
        with pytest.raises(ValueError, match="is not an autobyte meta-network dataset") as e:
            MetaDataset.load(files[bad])
        assert repr(files[bad]) in str(e.value)
    assert len(MetaDataset.load(files["good"]).speed) == 2 * 3  # a good one still loads: 2 windows x (2 candidates + c0)


def test_readme_error_example_is_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    example = re.search(r"`(autobyte demo: error: [^`]*)`", (REPO / "README.md").read_text())
    assert example, "README.md lost its error example"
    assert main(["demo", "--tuner", "fastest"]) == 2
    assert capsys.readouterr().err.startswith(example.group(1))
