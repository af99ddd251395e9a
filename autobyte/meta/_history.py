"""What past jobs on this cluster measured: where a new job starts.

Every configuration an :class:`~autobyte.meta.AutoByteTuner` measures is
measured in one set of conditions (a regime of its
:class:`~autobyte.meta._ledger.Ledger`), so the speeds of two
configurations of one regime compare them, whatever the model and the link.
With ``history_dir`` set, the tuner keeps its ledger in that folder, one JSON
file per job, and a new job starts at the configuration those regimes
measured fastest (:meth:`JobHistory.pick`) instead of the one it was given.

The pick is a least-squares fit of every kept measurement's log speed to a
level per regime plus an effect per configuration (the configuration given
to this job fixed at 0; every other effect drawn towards 0 by ``prior``
windows, so a configuration seen in one window of one regime moves little).
The start moves only when the best effect beats the given configuration's
by ``min_gain`` and comes from at least ``min_regimes`` regimes. Effects are
assumed to carry over between models and conditions: where they do not (a
cluster that trains models of very different shape), the tuner's trials and
the do-no-harm guard (whose reference is the start picked here) take over.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..core.space import Config, SearchSpace
from ._ledger import Regime
from ._plain import _check_range

#: format of a job's file; a file of another version is skipped (warned)
VERSION = 1


class JobHistory:
    """A folder of past jobs' measurements, and the start they suggest.

    Args:
        folder: where the jobs' files are (created at the first save).
        write: save this job's measurements there (``False``: read only, e.g.
            to judge a job on a history it must not add to).
        min_gain: relative advantage over the given configuration the best
            configuration of the history needs to be started from (0.02).
        prior: windows' worth of "no better than the given configuration"
            each effect starts from (1.0).
        min_regimes: regimes a configuration must have been measured in,
            beside another configuration, to be started from (2).
        max_jobs: the most recent job files read (64).

    Raises:
        TypeError: ``folder`` not a path.
        ValueError: a threshold out of range.
    """

    def __init__(self, folder: str | os.PathLike[str], *, write: bool = True, min_gain: float = 0.02,
                 prior: float = 1.0, min_regimes: int = 2, max_jobs: int = 64) -> None:
        if not isinstance(folder, (str, os.PathLike)) or not str(folder):
            raise TypeError(f"history_dir must be a folder path (str or os.PathLike), but got {folder!r}.")
        self.folder = Path(folder).expanduser()
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"history_dir must be a folder, but {str(self.folder)!r} is a file.")
        self.write = bool(write)
        self.min_gain = _check_range("min_gain", min_gain, 0.0, 10.0)
        self.prior = _check_range("prior", prior, 1e-9, 1e6)
        self.min_regimes = int(_check_range("min_regimes", min_regimes, 1, 1e6))
        self.max_jobs = int(_check_range("max_jobs", max_jobs, 1, 1e6))

    # ------------------------------------------------------------------ files
    def path(self, job: str) -> Path:
        return self.folder / f"job-{job}.json"

    def save(self, job: str, regimes: Iterable[Regime], memory: int = 3) -> None:
        """Write this job's regimes (each configuration's speed and windows, at most ``memory``) to its file.

        Atomic (a reader sees the old file or the new one); an error is warned, never raised:
        the history must not stop training.
        """
        if not self.write:
            return
        kept = []
        for r in regimes:
            rows = [[c.partition_bytes, c.credit_bytes, float(m[0]), float(min(m[1], memory))]
                    for c, m in r.measured.items() if m[0] > 0 and math.isfinite(m[0])]
            if rows:
                kept.append({"measured": rows, "iterations": int(sum(r.durations))})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".job-", suffix=".tmp")
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from the cluster's other users
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "job": job, "regimes": kept}, f)
            os.replace(tmp, self.path(job))
        except OSError as exc:
            warnings.warn(f"autobyte: cannot save the job history in {str(self.folder)!r} ({exc}); training goes on.",
                          stacklevel=3)

    def load(self, exclude: str | None = None) -> list[list[tuple[Config, float, float]]]:
        """Every regime of the most recent ``max_jobs`` job files but ``exclude``'s: ``(config, speed, windows)`` rows.

        Unreadable files and files of another format version are skipped with a warning.
        """
        if not self.folder.is_dir():
            return []
        mine = None if exclude is None else self.path(exclude).name
        files = sorted((p for p in self.folder.glob("job-*.json") if p.name != mine), key=_mtime, reverse=True)
        out: list[list[tuple[Config, float, float]]] = []
        for p in files[: self.max_jobs]:
            try:
                data = json.loads(p.read_text())
                if data.get("version") != VERSION:
                    raise ValueError(f"format version {data.get('version')!r}, expected {VERSION}")
                job = []  # a file counts whole or not at all
                for r in data["regimes"]:
                    rows = [(Config(int(m[0]), int(m[1])), float(m[2]), float(m[3])) for m in r["measured"]]
                    if any(not (s > 0 and math.isfinite(s) and w > 0) for _, s, w in rows):
                        raise ValueError("a speed or window count that is not a positive number")
                    job.append(rows)
                out.extend(job)
            except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
                warnings.warn(f"autobyte: skipping job history file {str(p)!r} ({exc}).", stacklevel=3)
        return out

    # ------------------------------------------------------------------ the pick
    def effects(self, regimes: Sequence[Sequence[tuple[Config, float, float]]], initial: Config,
                space: SearchSpace | None = None) -> dict[Config, tuple[float, int]]:
        """Each configuration's effect (log speed against ``initial``) and the regimes it was compared in.

        Only regimes with two configurations or more compare anything; with
        ``space``, configurations outside it are left out (``initial`` never is).
        """
        return self._fit(_comparing(regimes, initial, space), initial)

    def _fit(self, rows: list[list[tuple[Config, float, float]]], initial: Config) -> dict[Config, tuple[float, int]]:
        """:meth:`effects` of regimes already kept by :func:`_comparing`."""
        if not rows:
            return {}
        cfgs = sorted({c for r in rows for c, _, _ in r if c != initial})
        if not cfgs:
            return {}
        col = {c: i for i, c in enumerate(cfgs)}
        n_c = len(cfgs)
        # each regime's level is solved out exactly: for given effects it is the weighted mean of
        # (log speed - effect) over the regime, so the fit is a ridge regression on rows centred per regime
        xs, ys, ws = [], [], []
        for r in rows:
            x = np.zeros((len(r), n_c))
            for k, (c, _, _) in enumerate(r):
                if c != initial:
                    x[k, col[c]] = 1.0
            y = np.log([sp for _, sp, _ in r])
            w = np.asarray([wt for _, _, wt in r])
            xs.append(x - (w @ x) / w.sum())
            ys.append(y - (w @ y) / w.sum())
            ws.append(w)
        sw = np.sqrt(np.concatenate(ws))
        a = np.vstack([np.vstack(xs) * sw[:, None], math.sqrt(self.prior) * np.eye(n_c)])
        sol = np.linalg.lstsq(a, np.concatenate([np.concatenate(ys) * sw, np.zeros(n_c)]), rcond=None)[0]
        seen = Counter(c for r in rows for c in {x for x, _, _ in r})  # regimes each configuration was compared in
        return {c: (float(sol[col[c]]), seen[c]) for c in cfgs}

    def plan(self, space: SearchSpace, initial: Config, exclude: str | None = None) -> HistoryPlan:
        """Where to start, why, and which configurations past jobs measured slower than that start.

        ``slower``: every configuration of ``space`` whose effect is below the
        start's by more than ``min_gain`` (compared in one regime or more;
        the fit has drawn an effect seen in few windows towards the given
        configuration's). Its trial would repeat a comparison the cluster
        has already made: the tuner does not try them (``history_veto``).
        """
        regimes = self.load(exclude)
        rows = _comparing(regimes, initial, space)
        eff = self._fit(rows, initial)
        ok = {c: e for c, (e, n) in eff.items() if n >= self.min_regimes}
        start, level = initial, 0.0
        if not ok:
            reason = (f"history: {len(regimes)} regimes in {str(self.folder)!r}, no configuration compared in "
                      f"{self.min_regimes}+ of them; starting at {initial}")
        else:
            best = max(ok, key=ok.__getitem__)
            gain = math.expm1(ok[best])
            if ok[best] <= math.log1p(self.min_gain):
                reason = (f"history: the fastest of past jobs, {best}, ran {100 * gain:+.1f}% against {initial} "
                          f"over {eff[best][1]} regimes (under {100 * self.min_gain:.0f}%); starting at {initial}")
            else:
                start, level = best, ok[best]
                reason = (f"history: {best} ran {100 * gain:+.1f}% against {initial} over the {eff[best][1]} regimes "
                          f"of past jobs that compared it ({len(regimes)} regimes kept in {str(self.folder)!r}); "
                          f"starting there")
        effect = {c: e for c, (e, _) in eff.items()}
        if any(c == initial for r in rows for c, _, _ in r):
            effect[initial] = 0.0  # the reference, when some regime compared it with another configuration
        slower = frozenset(c for c, e in effect.items()
                           if c != start and c in space and e < level - math.log1p(self.min_gain))
        return HistoryPlan(start, reason, slower)

    def pick(self, space: SearchSpace, initial: Config, exclude: str | None = None) -> tuple[Config, str]:
        """The configuration to start from, and why (``initial`` when the history does not beat it)."""
        p = self.plan(space, initial, exclude)
        return p.start, p.reason


@dataclass(frozen=True)
class HistoryPlan:
    """What the history says to a new job: where to start, why, and what not to try (:meth:`JobHistory.plan`)."""

    start: Config
    reason: str
    slower: frozenset[Config]


def _comparing(regimes: Sequence[Sequence[tuple[Config, float, float]]], initial: Config,
               space: SearchSpace | None) -> list[list[tuple[Config, float, float]]]:
    """The regimes that compare configurations: those left with two or more once ``space`` filtered them (``initial`` kept)."""
    rows = [[(c, s, w) for c, s, w in r if space is None or c in space or c == initial] for r in regimes]
    return [r for r in rows if len({c for c, _, _ in r}) >= 2]


def _mtime(p: Path) -> float:
    """When ``p`` was last written; a file removed since it was listed sorts last (reading it then warns)."""
    try:
        return p.stat().st_mtime
    except OSError:
        return -math.inf


def new_job_id() -> str:
    """A job's name in the history folder (12 hex digits, random)."""
    return uuid.uuid4().hex[:12]
