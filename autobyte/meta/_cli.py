"""``autobyte dataset generate`` (meta-network training data from the simulator) and ``autobyte train-meta``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from ..cli import file_arg, int_arg, out_arg

    d = sub.add_parser("dataset", help="draw meta-network training data from the simulator (one .npz per run)",
                       description="Meta-network training data from the simulator: windows of a job under a current "
                                   "configuration, each with candidate configurations and the speed the simulator gives "
                                   "them in the same conditions. `autobyte train-meta --data` reads it.")
    dsub = d.add_subparsers(dest="dataset_command", metavar="ACTION")
    g = dsub.add_parser("generate", help="draw windows from the simulator into one .npz",
                        description="Draw --contexts windows (random model, workers, architecture, bandwidth, stragglers, "
                                    "shared GPUs, latency and per-message cost), each with --candidates configurations "
                                    "simulated in the same conditions, into one .npz; the content depends only on --seed. "
                                    "Several files (other seeds) train together: `autobyte train-meta --data FOLDER`.")
    g.add_argument("--out", required=True, type=out_arg("--out", suffix=".npz"), help="output .npz file")
    g.add_argument("--contexts", type=int_arg("--contexts", 1, 10**7), default=1500,
                   help="windows drawn, each with --candidates rows (default 1500)")
    g.add_argument("--candidates", type=int_arg("--candidates", 2, 10_000), default=20,
                   help="candidate configurations simulated per window (default 20)")
    g.add_argument("--seed", type=int_arg("--seed", 0, 2**32 - 1), default=0, help="random seed (default 0)")
    g.add_argument("--no-progress", action="store_true", help="do not print progress")
    g.set_defaults(func=_dataset_generate)
    d.set_defaults(func=_dataset_usage)

    p = sub.add_parser("train-meta", help="train the meta-network offline, held out by model and by network condition",
                       description="Train the meta-network offline on `autobyte dataset generate` data (needs Keras), "
                                   "hold out models and a bandwidth band, and write numpy weights with their held-out "
                                   "report (AutoByteTuner(weights=...)).")
    p.add_argument("--data", required=True, action="append", type=file_arg("--data", kind="any"),
                   help="a .npz of `autobyte dataset generate` (or benchmarks/collect.py) or a folder of them; "
                        "repeat to combine")
    p.add_argument("--batch-size", type=int_arg("--batch-size", 1, 1 << 20), default=64, help="training batch size (default 64)")
    p.add_argument("--out", required=True, type=out_arg("--out", suffix=".npz"),
                   help="output weights, NAME.npz (numpy arrays; a NAME.npz.json sidecar with shape and SHA-256 is written beside)")
    p.add_argument("--epochs", type=int_arg("--epochs", 1, 100_000), default=40, help="training epochs (default 40)")
    p.add_argument("--seed", type=int_arg("--seed", 0, 2**32 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--report", default=None, type=out_arg("--report"), help="write held-out metrics as JSON here")
    p.set_defaults(func=_train_meta)


def _load_data(paths: list[str] | str) -> Any:
    """The :class:`~autobyte.meta._data.MetaDataset` of every ``.npz`` in ``paths`` (files or folders of them), joined."""
    from ..cli import CLIError
    from ._data import MetaDataset

    parts: list[MetaDataset] = []
    try:
        for path in [paths] if isinstance(paths, str) else paths:
            p = Path(path)
            files = sorted(p.glob("*.npz")) if p.is_dir() else [p]
            if not files or not all(f.is_file() for f in files):
                raise CLIError(f"--data must be a .npz of `autobyte dataset generate` or a folder of them, but got --data={path!r}.")
            parts.extend(MetaDataset.load(f) for f in files)
    except (ValueError, FileNotFoundError) as exc:  # every loader's message names the file
        raise CLIError(f"--data: {exc}") from None
    return MetaDataset.concat(parts)


def _dataset_usage(args: argparse.Namespace) -> int:
    from ..cli import CLIError

    raise CLIError("give an action: autobyte dataset generate --out FILE.npz (see `autobyte dataset --help`).")


def _dataset_generate(args: argparse.Namespace) -> int:
    from ._data import generate

    data = generate(args.contexts, n_candidates=args.candidates, seed=args.seed, progress=not args.no_progress)
    data.save(args.out)
    print(f"wrote {len(data.observed)} windows, {len(data.speed)} rows to {args.out}")
    return 0


def _train_meta(args: argparse.Namespace) -> int:
    ds = _load_data(args.data)  # before importing Keras: a bad file is reported at once
    from ._train import evaluate, evaluate_adaptation, train

    parts = ds.split()
    print({k: (len(v.observed), len(v.speed)) for k, v in parts.items()}, flush=True)
    net = train(parts["train"], epochs=args.epochs, seed=args.seed, batch_size=args.batch_size, validation=parts["heldout_model"], verbose=2)
    report: dict[str, Any] = {"train": evaluate(net, parts["train"])}
    for k in ("heldout_model", "heldout_condition"):
        report[k] = evaluate(net, parts[k])
        report[k + "_adaptation"] = evaluate_adaptation(net, parts[k], n_contexts=30)
    net.save(args.out, heldout=report)
    print(json.dumps(report, indent=1))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    return 0


def _check_weights(path: str | None, flag: str = "--weights") -> None:
    """Load ``path`` once up front, so that a bad weights file is one line, not a traceback after minutes."""
    if path is None:
        return
    from ..cli import CLIError

    side = Path(path + ".json")
    if not side.is_file():  # checked before the network module (and its runtime) is imported
        raise CLIError(f"{flag}={path!r} is not usable meta-network weights (its sidecar {str(side)!r} is missing).")
    from ._network import MetaNetwork

    try:
        MetaNetwork.load(path)
    except (ValueError, OSError, KeyError) as exc:
        raise CLIError(f"{flag}={path!r} is not usable meta-network weights ({exc}).") from None
