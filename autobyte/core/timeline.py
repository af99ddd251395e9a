"""Timelines in the Chrome trace event format (open in Perfetto or chrome://tracing).

Engines and the simulator record compute and each message's communication
as spans on named tracks; :meth:`Timeline.save` writes the JSON.
"""

from __future__ import annotations

import json
import threading
from typing import Any


class Timeline:
    """A thread-safe list of trace events, times in seconds.

    Args:
        process: process name shown in the viewer (e.g. ``"rank 0"``).
        pid: process id in the trace (use the rank to merge several files).
    """

    def __init__(self, process: str = "autobyte", pid: int = 0) -> None:
        self.pid = pid
        self._tracks: dict[str, int] = {}
        self._events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}}]
        self._lock = threading.Lock()
        self._t0: float | None = None

    def _tid(self, track: str) -> int:
        if track not in self._tracks:
            tid = len(self._tracks) + 1
            self._tracks[track] = tid
            self._events.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid, "args": {"name": track}})
        return self._tracks[track]

    def _us(self, t: float) -> float:
        if self._t0 is None:
            self._t0 = t
        return round((t - self._t0) * 1e6, 3)

    def span(self, name: str, track: str, start_s: float, end_s: float, **args: Any) -> None:
        """A complete event from ``start_s`` to ``end_s`` on ``track``."""
        with self._lock:
            self._events.append({
                "name": name, "ph": "X", "pid": self.pid, "tid": self._tid(track),
                "ts": self._us(start_s), "dur": round(max(0.0, end_s - start_s) * 1e6, 3), "args": args,
            })

    def instant(self, name: str, track: str, t_s: float, **args: Any) -> None:
        with self._lock:
            self._events.append({"name": name, "ph": "i", "s": "t", "pid": self.pid, "tid": self._tid(track), "ts": self._us(t_s), "args": args})

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def to_json(self) -> dict[str, Any]:
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)
