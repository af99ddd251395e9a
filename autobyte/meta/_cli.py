"""``autobyte meta-data``, ``autobyte train-meta`` and ``autobyte evaluate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


#: What ``autobyte evaluate --only`` accepts (the experiments of ``_evaluate.run_all``).
EXPERIMENTS = ("fig5", "fig6", "fig7", "fig89", "steady", "shift")


def register(sub: Any) -> None:
    from ..cli import file_arg, int_arg, list_arg, out_arg

    p = sub.add_parser("meta-data", help="draw meta-network training data from the simulator (.npz)")
    p.add_argument("--out", required=True, type=out_arg("--out", suffix=".npz"), help="output .npz file")
    p.add_argument("--contexts", type=int_arg("--contexts", 1, 10**7), default=1500,
                   help="windows drawn, each with --candidates rows (default 1500)")
    p.add_argument("--candidates", type=int_arg("--candidates", 2, 10_000), default=20,
                   help="candidate configurations simulated per window (default 20)")
    p.add_argument("--seed", type=int_arg("--seed", 0, 2**32 - 1), default=0, help="random seed (default 0)")
    p.set_defaults(func=_meta_data)

    p = sub.add_parser("train-meta", help="train the meta-network offline, held out by model and by network condition")
    p.add_argument("--data", required=True, action="append", type=file_arg("--data", kind="any"),
                   help="a simulator dataset directory (`autobyte dataset generate`, meta.json + shards), or a .npz / directory "
                        "of .npz from `autobyte meta-data`; repeat to combine")
    p.add_argument("--batch-size", type=int_arg("--batch-size", 1, 1 << 20), default=64, help="training batch size (default 64)")
    p.add_argument("--out", required=True, type=out_arg("--out", suffix=".npz"),
                   help="output weights, NAME.npz (numpy arrays; a NAME.npz.json sidecar with shape and SHA-256 is written beside)")
    p.add_argument("--epochs", type=int_arg("--epochs", 1, 100_000), default=40, help="training epochs (default 40)")
    p.add_argument("--seed", type=int_arg("--seed", 0, 2**32 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--report", default=None, type=out_arg("--report"), help="write held-out metrics as JSON here")
    p.set_defaults(func=_train_meta)

    p = sub.add_parser("evaluate", help="the paper's experiments on the simulator (tables and plots into docs/)")
    p.add_argument("--out", default="docs", type=out_arg("--out", kind="dir"),
                   help="folder; writes figures/eval_results.json and figures/eval_*.png (default docs)")
    p.add_argument("--weights", default=None, type=file_arg("--weights"), help="meta-network weights (default: the shipped ones)")
    p.add_argument("--only", default=None, type=list_arg("--only", EXPERIMENTS),
                   help=f"comma-separated subset of {','.join(EXPERIMENTS)} (default: all)")
    p.set_defaults(func=_evaluate)


def _load_data(paths: list[str] | str) -> Any:
    from ..cli import CLIError
    from ._data import MetaDataset, from_sim_dataset

    parts = []
    try:
        for path in [paths] if isinstance(paths, str) else paths:
            p = Path(path)
            if (p / "meta.json").is_file():
                parts.append(from_sim_dataset(p))
                continue
            files = sorted(p.glob("*.npz")) if p.is_dir() else [p]
            if not files or not all(f.is_file() for f in files):
                raise CLIError(f"--data must be a simulator dataset directory, a .npz file or a directory of them, but got --data={path!r}.")
            parts.extend(MetaDataset.load(f) for f in files)
    except (ValueError, FileNotFoundError) as exc:  # every loader's message names the file
        raise CLIError(f"--data: {exc}") from None
    return MetaDataset.concat(parts)


def _meta_data(args: argparse.Namespace) -> int:
    from ._data import generate

    generate(args.contexts, n_candidates=args.candidates, seed=args.seed, progress=True).save(args.out)
    print(f"wrote {args.out}")
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


def _evaluate(args: argparse.Namespace) -> int:
    from ._evaluate import run_all

    _check_weights(args.weights)
    only = None if args.only is None else set(args.only)
    run_all(Path(args.out), weights=args.weights, only=only)
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
