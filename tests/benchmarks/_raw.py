"""Raw measurement folders as ``benchmarks/collect.py``'s ranks write them, made by the simulator (no testbed).

The windows are the simulator's of a small CNN-like profile on 2 workers, with a per-message cost far above
the range the shipped meta-network was trained on (so that adapting to them has something to learn).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: A CNN-like profile: small conv layers first, one big fully connected layer (as ``make_cnn``'s).
PROFILE: dict[str, Any] = {
    "layer_bytes": [3584, 256, 73856, 512, 295424, 1024, 590336, 1024, 12584448, 61480],
    "forward_s": [0.004, 0.001, 0.006, 0.001, 0.005, 0.001, 0.006, 0.001, 0.002, 0.0002],
    "backward_s": [0.006, 0.001, 0.012, 0.001, 0.010, 0.001, 0.012, 0.001, 0.004, 0.0004],
    "layer_names": [str(i) for i in range(10)],
    "batch_size": 16,
    "compute_only_s": [0.2, 0.1, 0.1, 0.11, 0.09],
}


def write_raw(folder: Path, collect: Any, *, rates: Sequence[float] = (150.0, 500.0, 2000.0), reps: int = 2,
              configs: Sequence[Any] | None = None, per_message_s: float = 0.02, iters: int = 4) -> Path:
    """``folder/rank0.json`` and ``rank1.json``: every config of ``configs`` (default ``collect.COLLECT_CONFIGS``)
    at every rate, ``reps`` times (``collect``: the loaded script)."""
    from autobyte import sim

    model = sim.ModelProfile("cnn", np.array(PROFILE["layer_bytes"]), np.array(PROFILE["forward_s"]),
                             np.array(PROFILE["backward_s"]), PROFILE["batch_size"], device="cpu")
    segs, iter_s, windows = [], [], []
    for rate in rates:
        cluster = sim.Cluster.from_gbps(2, rate / 1000, per_message_s=per_message_s)
        for rep in range(reps):
            for k, cfg in enumerate(configs or collect.COLLECT_CONFIGS):
                r = sim.simulate(model, cluster, cfg, n_iters=iters, seed=17 * rep + k)
                segs.append(collect.Segment(rate, cfg, 2, iters, rep))
                iter_s.append([r.worker_iter_time_s[:, w].tolist() for w in range(2)])
                windows.append(r.window_stats())
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(2):
        doc = {"rank": rank, "segments": [s.to_dict() for s in segs], "iter_s": [x[rank] for x in iter_s],
               "windows": [w[rank].to_vector().tolist() for w in windows], "tensor_bytes": PROFILE["layer_bytes"],
               "profile": PROFILE, "info": {"spec": {}, "world_size": 2}}
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder
