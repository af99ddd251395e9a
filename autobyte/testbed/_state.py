"""The run state file and the cleanup that reads it.

Every namespace is written to the state file *before* it is created, so a
launcher killed at any point (SIGKILL included) leaves a record that
``autobyte launch --cleanup`` can act on. Cleanup only deletes namespaces whose
name carries the run's prefix and that hold nothing but interfaces named with
that prefix (and ``lo``); anything else is reported and left alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A run prefix: "ab" + 6 hex digits, short enough for 15-character interface names.
PREFIX_RE = re.compile(r"ab[0-9a-f]{6}")

STATE_VERSION = 1


class TestbedError(RuntimeError):
    """The testbed cannot do what was asked (no root, missing tool, a command failed)."""

    __test__ = False  # not a pytest test class


def default_state_dir() -> Path:
    """``$AUTOBYTE_TESTBED_STATE_DIR``, else ``/run/autobyte`` when writable, else ``<tmp>/autobyte``."""
    env = os.environ.get("AUTOBYTE_TESTBED_STATE_DIR")
    if env:
        return Path(env)
    run = Path("/run")
    if run.is_dir() and os.access(run, os.W_OK):
        return run / "autobyte"
    return Path(tempfile.gettempdir()) / "autobyte"


def process_start_time(pid: int) -> int | None:
    """The kernel start time of ``pid`` (clock ticks since boot), or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    rest = stat.rsplit(")", 1)[-1].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


@dataclass
class RunState:
    """What one run created, as recorded on disk (plain JSON)."""

    prefix: str
    path: Path
    launcher_pid: int = field(default_factory=os.getpid)
    launcher_start: int | None = None
    namespaces: list[str] = field(default_factory=list)
    socket: str | None = None
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.launcher_start is None and self.launcher_pid == os.getpid():
            self.launcher_start = process_start_time(self.launcher_pid)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "prefix": self.prefix,
            "launcher_pid": self.launcher_pid,
            "launcher_start": self.launcher_start,
            "namespaces": list(self.namespaces),
            "socket": self.socket,
            "created_at": self.created_at,
        }

    def save(self) -> None:
        """Write atomically (a reader never sees half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, path: Path) -> "RunState":
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"{path} is not an autobyte testbed state file (version {STATE_VERSION}).")
        prefix = data.get("prefix")
        if not isinstance(prefix, str) or not PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"{path} has prefix={prefix!r}, which is not an autobyte run prefix (ab + 6 hex digits).")
        if path.stem != prefix:
            raise ValueError(f"{path} records prefix={prefix!r}, which does not match its file name.")
        ns = data.get("namespaces", [])
        if not isinstance(ns, list) or not all(isinstance(n, str) for n in ns):
            raise ValueError(f"{path} has a malformed 'namespaces' list.")
        return cls(
            prefix=prefix,
            path=path,
            launcher_pid=int(data.get("launcher_pid", 0)),
            launcher_start=data.get("launcher_start"),
            namespaces=list(ns),
            socket=data.get("socket"),
            created_at=float(data.get("created_at", 0.0)),
        )

    def launcher_alive(self) -> bool:
        """True while the process that made this run still runs (pid reuse is detected)."""
        if self.launcher_pid <= 0:
            return False
        start = process_start_time(self.launcher_pid)
        if start is None or _is_zombie(self.launcher_pid):
            return False
        return self.launcher_start is None or start == self.launcher_start


def ours(prefix: str, name: str) -> bool:
    """Whether a namespace name is one this run's prefix would make."""
    return re.fullmatch(re.escape(prefix) + r"-(br|w\d+)", name) is not None


def list_namespaces() -> set[str]:
    """Names from ``ip netns list`` (empty when ``ip`` is missing)."""
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        return set()
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def namespace_links(ns: str) -> list[str]:
    """Interface names inside namespace ``ns``."""
    out = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def namespace_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_namespace_processes(ns: str, *, grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL, every process living in namespace ``ns``."""
    pids = namespace_pids(ns)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if process_start_time(p) is not None and not _is_zombie(p)]
            if pids:
                time.sleep(0.05)
        if not pids:
            return


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


def teardown(state: RunState) -> list[str]:
    """Remove what ``state`` records; return problems (empty when all went).

    Deleting a namespace removes its veth ends (and so their peers), the
    bridge, and every qdisc on them; processes still inside are killed first
    so that nothing keeps the namespace alive.
    """
    problems: list[str] = []
    existing = list_namespaces()
    for ns in state.namespaces:
        if not ours(state.prefix, ns):
            problems.append(f"refused to touch namespace {ns!r}: its name does not carry this run's prefix {state.prefix!r}.")
            continue
        if ns not in existing:
            continue
        foreign = [l for l in namespace_links(ns) if l != "lo" and not l.startswith(state.prefix)]
        if foreign:
            problems.append(
                f"refused to delete namespace {ns!r}: it holds interfaces this run did not create: {foreign}."
            )
            continue
        kill_namespace_processes(ns)
        r = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            problems.append(f"ip netns delete {ns} failed: {r.stderr.strip()}")
    if state.socket:
        try:
            os.unlink(state.socket)
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"could not remove control socket {state.socket}: {exc}")
    if not problems:
        try:
            state.path.unlink()
        except FileNotFoundError:
            pass
    return problems


def cleanup_runs(state_dir: Path | None = None, *, run_id: str | None = None) -> tuple[list[str], list[str]]:
    """Clean up runs whose launcher is gone (or the one named ``run_id``).

    Returns ``(cleaned, problems)``: the prefixes removed and messages about what
    was left alone. A run whose launcher still runs is skipped (and reported).
    """
    state_dir = default_state_dir() if state_dir is None else Path(state_dir)
    cleaned: list[str] = []
    problems: list[str] = []
    if run_id is not None:
        prefix = run_id if run_id.startswith("ab") else "ab" + run_id
        if not PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"run_id must be 6 hex digits (or ab + 6 hex digits), but got run_id={run_id!r}.")
        paths = [state_dir / f"{prefix}.json"]
        if not paths[0].exists():
            raise ValueError(f"no testbed run {prefix!r} recorded in {state_dir}.")
    else:
        paths = sorted(state_dir.glob("ab*.json")) if state_dir.is_dir() else []
    for path in paths:
        try:
            state = RunState.load(path)
        except (OSError, ValueError) as exc:
            problems.append(f"skipped {path}: {exc}")
            continue
        if state.launcher_alive():
            problems.append(f"run {state.prefix} is still running (launcher pid {state.launcher_pid}); left alone.")
            continue
        errs = teardown(state)
        if errs:
            problems.extend(errs)
        else:
            cleaned.append(state.prefix)
    # namespaces that look like ours but that no state file records: report only
    recorded = set()
    for path in state_dir.glob("ab*.json") if state_dir.is_dir() else []:
        try:
            recorded |= set(RunState.load(path).namespaces)
        except (OSError, ValueError):
            pass
    for ns in sorted(list_namespaces()):
        if re.fullmatch(r"ab[0-9a-f]{6}-(br|w\d+)", ns) and ns not in recorded and run_id is None:
            if not any(ns.startswith(p + "-") for p in cleaned):
                problems.append(f"namespace {ns!r} looks like a testbed one but no state file records it; not touched.")
    return cleaned, problems
