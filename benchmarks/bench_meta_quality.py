"""Prediction quality of meta-network weights on the held-out split.

    OMP_NUM_THREADS=1 python benchmarks/bench_meta_quality.py --data DATA [--data DATA2] [--weights W.npz]

Held out: models resnet101, densenet169, vgg19 (never in training) and every
window with bandwidth in 6..9 Gbps. Reports MAPE of predicted speeds, how
often the predicted-best candidate is within 5% of the true best, and the
MAPE after online adaptation on 5 or 10 observed configurations of the same
window (each adaptation starts from the offline weights), with the error on
other windows after adapting (forgetting).
"""

from __future__ import annotations

import argparse
import json

from autobyte.meta import MetaNetwork
from autobyte.meta._cli import _load_data
from autobyte.meta._train import evaluate, evaluate_adaptation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--weights", default=None)
    ap.add_argument("--contexts", type=int, default=40)
    args = ap.parse_args()
    net = MetaNetwork.load(args.weights) if args.weights else MetaNetwork.load_default()
    parts = _load_data(args.data).split()
    out = {}
    for k in ("heldout_model", "heldout_condition"):
        out[k] = evaluate(net, parts[k])
        for n_obs in (5, 10):
            out[f"{k}_adapt_{n_obs}"] = evaluate_adaptation(net, parts[k], n_observed=n_obs, n_contexts=args.contexts)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
