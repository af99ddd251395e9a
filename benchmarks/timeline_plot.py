"""Draw a Chrome-trace timeline (``ScheduledTraining.save_trace``) as a PNG.

    python benchmarks/timeline_plot.py TRACE.json OUT.png [--title TITLE]

One row per track (compute, communication, update); communication spans are
coloured by their message's priority (dark: layers nearest the input).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def plot_trace(trace: dict[str, Any], path: str, *, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    order = [t for t in ("compute", "communication", "update") if t in names.values()]
    row = {tid: order.index(n) for tid, n in names.items() if n in order}
    spans = [e for e in ev if e.get("ph") == "X" and e.get("tid") in row]
    prios = [e["args"].get("priority", 0) for e in spans if "priority" in e.get("args", {})]
    pmax = max(prios) if prios else 1
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(11, 2.8))
    for e in spans:
        y = row[e["tid"]]
        x0, w = e["ts"] / 1e3, max(e["dur"] / 1e3, 0.02)
        if "priority" in e.get("args", {}):
            color = cmap(e["args"]["priority"] / max(pmax, 1))
        else:
            color = "tab:orange" if order[y] == "update" else "tab:blue"
        ax.broken_barh([(x0, w)], (y - 0.4, 0.8), facecolors=color, edgecolors="none")
    for e in ev:
        if e.get("ph") == "i" and e.get("tid") in row:
            ax.plot([e["ts"] / 1e3] * 2, [row[e["tid"]] - 0.45, row[e["tid"]] + 0.45], color="k", lw=0.4)
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel("ms (ticks on compute: a gradient became ready; colour on communication: priority, dark = nearest the input)")
    ax.set_title(title or "autobyte timeline")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="Chrome-trace JSON written by save_trace()")
    ap.add_argument("out", help="PNG file to write")
    ap.add_argument("--title", default="", help="plot title (default: autobyte timeline)")
    a = ap.parse_args()
    with open(a.trace) as f:
        plot_trace(json.load(f), a.out, title=a.title)


if __name__ == "__main__":
    main()
