"""``autobyte meta-data``, ``autobyte train-meta`` and ``autobyte evaluate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("meta-data", help="draw meta-network training data from the simulator (.npz)")
    p.add_argument("--out", required=True, help="output .npz file")
    p.add_argument("--contexts", type=int, default=1500, help="windows drawn (each with --candidates rows)")
    p.add_argument("--candidates", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_meta_data)

    p = sub.add_parser("train-meta", help="train the meta-network offline, held out by model and by network condition")
    p.add_argument("--data", required=True, action="append",
                   help="a simulator dataset directory (`autobyte dataset generate`, meta.json + shards), or a .npz / directory "
                        "of .npz from `autobyte meta-data`; repeat to combine")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", required=True, help="output weights, NAME.npz (numpy arrays; a NAME.npz.json sidecar with shape and SHA-256 is written beside)")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", default=None, help="write held-out metrics as JSON here")
    p.set_defaults(func=_train_meta)

    p = sub.add_parser("evaluate", help="the paper's experiments on the simulator (tables and plots into docs/)")
    p.add_argument("--out", default="docs", help="folder; writes figures/eval_results.json and figures/eval_*.png")
    p.add_argument("--weights", default=None, help="meta-network weights (default: the shipped ones)")
    p.add_argument("--only", default=None, help="comma-separated subset of fig5,fig6,fig7,fig89,steady,shift")
    p.set_defaults(func=_evaluate)


def _load_data(paths: list[str] | str) -> Any:
    from ._data import MetaDataset, from_sim_dataset

    parts = []
    for path in [paths] if isinstance(paths, str) else paths:
        p = Path(path)
        if (p / "meta.json").is_file():
            parts.append(from_sim_dataset(p))
            continue
        files = sorted(p.glob("*.npz")) if p.is_dir() else [p]
        if not files or not all(f.is_file() for f in files):
            raise SystemExit(f"--data must be a simulator dataset directory, a .npz file or a directory of them, but got {path!r}.")
        parts.extend(MetaDataset.load(f) for f in files)
    return MetaDataset.concat(parts)


def _meta_data(args: argparse.Namespace) -> int:
    from ._data import generate

    generate(args.contexts, n_candidates=args.candidates, seed=args.seed, progress=True).save(args.out)
    print(f"wrote {args.out}")
    return 0


def _train_meta(args: argparse.Namespace) -> int:
    if not str(args.out).endswith(".npz"):
        raise SystemExit(f"--out must end with '.npz', but got --out={args.out!r}.")
    from ._train import evaluate, evaluate_adaptation, train

    ds = _load_data(args.data)
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

    only = None if args.only is None else set(args.only.split(","))
    run_all(Path(args.out), weights=args.weights, only=only)
    return 0
