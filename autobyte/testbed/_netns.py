"""Network namespaces, veth links, a bridge and ``tc`` shaping.

Topology (nothing is created in the root namespace)::

    <p>-w0 [<p>w0 10.213.0.1] ==veth== [<p>b0]--+
    <p>-w1 [<p>w1 10.213.0.2] ==veth== [<p>b1]--+-- bridge <p>br   (namespace <p>-br)
    ...

``<p>`` is the run prefix (``ab`` + 6 hex digits). Each worker's upload is
shaped on its own veth end (egress, inside its namespace) and its download on
the bridge-side end (egress towards it), so up and down can differ. Latency is
a ``netem`` delay on the upload side only: one-way latency between two workers
equals ``delay_ms``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ._state import RunState, TestbedError, default_state_dir, list_namespaces, teardown

#: Subnet of the emulated network: worker i has 10.213.0.(i+1)/24.
SUBNET = "10.213.0"

#: Most workers one /24 holds (addresses .1 to .250).
MAX_WORKERS = 250

#: Queueing tbf allows before dropping (tc's "latency"), in milliseconds.
TBF_QUEUE_MS = 50.0

#: Smallest token bucket: twice a 64 KiB GSO packet. tbf can never send a queued packet longer than its
#: bucket, and ``tc qdisc change`` to a smaller bucket keeps the packets already queued, so a bucket that
#: shrinks below a queued packet stalls the link for good. The kernel counts a GSO packet with its headers
#: repeated per segment (64 KiB + 45 x 66 B ~ 68.5 KB at MSS 1448, more at a smaller MSS); the old
#: 64 KiB + 1514 B bucket (used below 528 Mbit/s) was too small for the 64 KiB packets queued at a higher rate.
MIN_BURST_BYTES = 2 * 64 * 1024


def require_root() -> None:
    """Raise :class:`TestbedError` unless running as root with ``ip`` and ``tc`` present."""
    if os.geteuid() != 0:
        raise TestbedError(
            "the autobyte testbed needs root (it creates network namespaces and tc qdiscs), "
            f"but this process runs as uid {os.geteuid()}; run it with sudo, or as root in a container "
            "with CAP_NET_ADMIN and CAP_SYS_ADMIN."
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"the autobyte testbed needs the '{tool}' command; install iproute2 (apt-get install -y iproute2).")


def burst_bytes(rate_mbit: float) -> int:
    """tbf bucket size for a rate: 1 ms worth of traffic, at least :data:`MIN_BURST_BYTES`."""
    return max(MIN_BURST_BYTES, int(rate_mbit * 1e6 / 8 * 1e-3))


def _run(args: list[str]) -> None:
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise TestbedError(f"`{' '.join(args)}` failed (exit {r.returncode}): {r.stderr.strip()}")


@dataclass(frozen=True)
class LinkRates:
    """Rates of one worker's link, in Mbit/s (``None``: not shaped)."""

    up_mbit: float | None
    down_mbit: float | None


class Network:
    """The namespaces, bridge and shaped links of one run.

    Use as a context manager, or call :meth:`create` then :meth:`destroy`.

    Args:
        n_workers: how many worker namespaces (1 to 250).
        delay_ms: one-way latency added between workers (default 0).
        state_dir: where the run state file goes (default :func:`default_state_dir`).

    Raises:
        TestbedError: not root, ``ip``/``tc`` missing, or an ``ip``/``tc`` command failed.
        ValueError: bad ``n_workers`` or ``delay_ms``.
    """

    def __init__(self, n_workers: int, *, delay_ms: float = 0.0, state_dir: str | os.PathLike[str] | None = None) -> None:
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or not 1 <= n_workers <= MAX_WORKERS:
            raise ValueError(f"n_workers must be an integer in [1, {MAX_WORKERS}], but got n_workers={n_workers!r}.")
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)) or not 0 <= delay_ms <= 10_000:
            raise ValueError(f"delay_ms must be a number of milliseconds in [0, 10000], but got delay_ms={delay_ms!r}.")
        self.n_workers = n_workers
        self.delay_ms = float(delay_ms)
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.prefix = ""
        self.state: RunState | None = None
        self.rates = [LinkRates(None, None) for _ in range(n_workers)]

    # -- names ------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.prefix[2:]

    @property
    def bridge_namespace(self) -> str:
        return f"{self.prefix}-br"

    def namespace(self, rank: int) -> str:
        return f"{self.prefix}-w{rank}"

    def ifname(self, rank: int) -> str:
        """The worker's interface inside its namespace."""
        return f"{self.prefix}w{rank}"

    def port_name(self, rank: int) -> str:
        """The bridge-side end of the worker's veth."""
        return f"{self.prefix}b{rank}"

    def address(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    # -- lifecycle --------------------------------------------------------
    def __enter__(self) -> "Network":
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def create(self) -> None:
        require_root()
        existing = list_namespaces()
        for _ in range(100):
            prefix = "ab" + secrets.token_hex(3)
            if not any(n.startswith(prefix) for n in existing) and not (self.state_dir / f"{prefix}.json").exists():
                break
        else:  # pragma: no cover - 24 random bits, 100 tries
            raise TestbedError("could not pick an unused run prefix")
        self.prefix = prefix
        self.state = RunState(prefix=prefix, path=self.state_dir / f"{prefix}.json")
        self.state.save()
        try:
            self._add_namespace(self.bridge_namespace)
            br = self.bridge_namespace
            bridge = f"{prefix}br"
            _run(["ip", "-n", br, "link", "add", bridge, "type", "bridge"])
            _run(["ip", "-n", br, "link", "set", bridge, "up"])
            for rank in range(self.n_workers):
                ns = self.namespace(rank)
                self._add_namespace(ns)
                _run(["ip", "-n", br, "link", "add", self.port_name(rank), "type", "veth",
                      "peer", "name", self.ifname(rank), "netns", ns])
                _run(["ip", "-n", br, "link", "set", self.port_name(rank), "master", bridge])
                _run(["ip", "-n", br, "link", "set", self.port_name(rank), "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(rank)}/24", "dev", self.ifname(rank)])
                _run(["ip", "-n", ns, "link", "set", self.ifname(rank), "up"])
                if self.delay_ms > 0:
                    # netem at the root of the upload side; tbf (handle 10:) hangs below it
                    self._add_netem(ns, self.ifname(rank))
        except BaseException:
            self.destroy()
            raise

    def _add_netem(self, ns: str, dev: str) -> None:
        args = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:",
                "netem", "delay", f"{self.delay_ms}ms", "limit", "100000"]
        r = subprocess.run(args, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            if "unknown" in r.stderr.lower():
                raise TestbedError(
                    f"delay_ms={self.delay_ms:g} needs the netem qdisc, which this kernel does not have "
                    "(CONFIG_NET_SCH_NETEM is not set, or the sch_netem module is missing); "
                    "run without a delay, or on a kernel with netem."
                )
            raise TestbedError(f"`{' '.join(args)}` failed (exit {r.returncode}): {r.stderr.strip()}")

    def _add_namespace(self, ns: str) -> None:
        assert self.state is not None
        # recorded before it exists: a launcher killed right after still leaves a record
        self.state.namespaces.append(ns)
        self.state.save()
        r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            self.state.namespaces.remove(ns)  # not ours: never delete it
            self.state.save()
            raise TestbedError(f"`ip netns add {ns}` failed (exit {r.returncode}): {r.stderr.strip()}")
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def destroy(self) -> list[str]:
        """Remove every namespace (with its links and qdiscs); return problems."""
        if self.state is None:
            return []
        problems = teardown(self.state)
        self.state = None
        return problems

    # -- shaping ----------------------------------------------------------
    def set_rates(self, up_mbit: float, down_mbit: float | None = None, *, ranks: list[int] | tuple[int, ...] | None = None) -> None:
        """Shape the links of ``ranks`` (default all) to ``up_mbit`` / ``down_mbit`` (default ``up_mbit``)."""
        down = up_mbit if down_mbit is None else down_mbit
        for rank in range(self.n_workers) if ranks is None else ranks:
            if not 0 <= rank < self.n_workers:
                raise ValueError(f"rank must be in [0, {self.n_workers}), but got rank={rank!r}.")
            old = self.rates[rank]
            ns = self.namespace(rank)
            parent = ["parent", "1:1"] if self.delay_ms > 0 else ["root"]
            if old.up_mbit != up_mbit:
                self._tbf("add" if old.up_mbit is None else "change", ns, self.ifname(rank), parent, up_mbit)
            if old.down_mbit != down:
                self._tbf("add" if old.down_mbit is None else "change", self.bridge_namespace, self.port_name(rank), ["root"], down)
            self.rates[rank] = LinkRates(up_mbit, down)

    def _tbf(self, verb: str, ns: str, dev: str, parent: list[str], rate_mbit: float) -> None:
        rate_bit = max(8, int(round(rate_mbit * 1e6)))
        _run(["tc", "-n", ns, "qdisc", verb, "dev", dev, *parent, "handle", "10:", "tbf",
              "rate", f"{rate_bit}bit", "burst", str(burst_bytes(rate_mbit)), "latency", f"{TBF_QUEUE_MS}ms"])

    def qdiscs(self) -> str:
        """``tc qdisc show`` of every namespace of the run (for logs and tests)."""
        out = []
        for ns in [self.bridge_namespace] + [self.namespace(r) for r in range(self.n_workers)]:
            r = subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True, check=False)
            out.append(f"# {ns}\n{r.stdout}")
        return "".join(out)
