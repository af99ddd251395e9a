"""Pictures for ``docs/simulator.md``: the paper's Fig. 3 grids and a timeline.

    python benchmarks/sim_figures.py docs/figures
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

import numpy as np

from autobyte.core.space import Config, MiB
from autobyte.sim import Cluster, get_model, simulate

PARTS = (1, 2, 4, 8)
CREDITS = (1, 2, 3, 4)


def grid(name: str, gbps: float, arch: str = "allreduce", n_workers: int = 8, n_iters: int = 10) -> np.ndarray:
    """Samples/s over the paper's Fig. 3 grid (partition 1..8 MiB x credit 1..4X)."""
    m, c = get_model(name), Cluster.from_gbps(n_workers, gbps, arch)
    return np.array([[simulate(m, c, Config.from_multiple(p * MiB, k), n_iters=n_iters).samples_per_s for k in CREDITS] for p in PARTS])


def _heatmaps(panels: Sequence[tuple[str, np.ndarray]], title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), constrained_layout=True)
    for ax, (label, g) in zip(np.atleast_1d(axes), panels):
        speedup = g / g.min()
        im = ax.imshow(speedup, origin="lower", cmap="viridis")
        i, j = np.unravel_index(int(g.argmax()), g.shape)
        ax.add_patch(plt.Rectangle((float(j) - 0.5, float(i) - 0.5), 1, 1, fill=False, ec="red", lw=2))
        for (a, b), v in np.ndenumerate(speedup):
            ax.text(b, a, f"{v:.2f}", ha="center", va="center", color="w" if v < speedup.max() * 0.9 else "k", fontsize=7)
        ax.set_xticks(range(len(CREDITS)), [f"{k}X" for k in CREDITS])
        ax.set_yticks(range(len(PARTS)), [f"{p}M" for p in PARTS])
        ax.set_xlabel("credit")
        ax.set_ylabel("partition")
        ax.set_title(f"{label}\nbest <{PARTS[i]}M, {CREDITS[j]}X>", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.7, label="speed-up over worst")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timeline(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = get_model("resnet50")
    r = simulate(m, Cluster.from_gbps(4, 10, jitter=0.0), Config.from_multiple(4 * MiB, 2), n_iters=2)
    ev = r.timeline
    t0 = min(e["start"] for e in ev if e["iteration"] == 0)
    fig, ax = plt.subplots(figsize=(10, 2.6), constrained_layout=True)
    L = m.n_layers
    for e in ev:
        if e["kind"] == "message":
            y, color = 0.0, matplotlib.colormaps["plasma"](e["index"] / max(1, r.n_messages - 1))
        elif e["worker"] == 0:
            y, color = 1.0, matplotlib.colormaps["Blues"](0.3 + 0.7 * e["index"] / L) if e["kind"] == "forward" else matplotlib.colormaps["Greens"](0.3 + 0.7 * e["index"] / L)
        else:
            continue
        ax.barh(y, (e["end"] - e["start"]) * 1e3, left=(e["start"] - t0) * 1e3, height=0.6, color=color, lw=0)
    ax.set_yticks([0, 1], ["messages (all workers)", "worker 0 compute"])
    ax.set_xlabel("time (ms)")
    ax.set_title("ResNet50, 4 workers, 10 Gbit/s ring all-reduce, <4 MiB, 2X>: forward (blue), backward (green), "
                 "messages coloured by plan order", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    names = ("resnet50", "vgg16", "alexnet", "densenet121")
    _heatmaps([(n, grid(n, 10)) for n in names], "Fig. 3(a) in the simulator: models, 8 workers, ring all-reduce, 10 Gbit/s",
              os.path.join(out, "sim_fig3a_models.png"))
    _heatmaps([(f"{g:g} Gbit/s", grid("resnet50", g)) for g in (20, 8, 5, 3)],
              "Fig. 3(b) in the simulator: ResNet50, 8 workers, ring all-reduce, bandwidth",
              os.path.join(out, "sim_fig3b_bandwidth.png"))
    _heatmaps([(n, grid(n, 10, "ps")) for n in names], "The same grid on a parameter server (8 co-located servers), 10 Gbit/s",
              os.path.join(out, "sim_fig3_ps.png"))
    timeline(os.path.join(out, "sim_timeline.png"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/figures")
