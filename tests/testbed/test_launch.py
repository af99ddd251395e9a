"""The testbed on this host: shaped rates measured with real TCP, traces, cleanup, real gloo/PS jobs.

Needs root and iproute2; skipped otherwise. Rates are checked within +-20% of
the shaped rate (TCP payload vs. link rate costs ~4%).
"""

from __future__ import annotations

import json
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autobyte.testbed import SUBNET, Testbed
from autobyte.testbed._state import namespace_pids

from .conftest import LAUNCH, REPO, host_snapshot, json_lines, launch, needs_root

pytestmark = needs_root

HERE = Path(__file__).resolve().parent


def within(x: float, target: float, tol: float = 0.2) -> bool:
    return (1 - tol) * target <= x <= (1 + tol) * target


def test_link_shaped_to_50_mbit(state_dir: Path) -> None:
    r = launch("-n", "2", "--bandwidth-mbit", "50", "--probe-s", "2", state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (res,) = json_lines(r.stdout, "w0")
    assert res["peer"] == f"{SUBNET}.2"
    assert within(res["mbit"], 50), res


def test_asymmetric_links_per_rank(state_dir: Path, tmp_path: Path) -> None:
    # 1 -> 0 is limited by rank 1's upload (20); 3 -> 2 by rank 2's download (30)
    trace = {"changes": [
        {"at": 0, "up_mbit": 200},
        {"at": 0, "up_mbit": 20, "down_mbit": 200, "ranks": [1]},
        {"at": 0, "up_mbit": 200, "down_mbit": 30, "ranks": [2]},
    ]}
    path = tmp_path / "asym.json"
    path.write_text(json.dumps(trace))
    r = launch("-n", "4", "--trace", str(path), "--probe-s", "2", state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (a,) = json_lines(r.stdout, "w0")
    (b,) = json_lines(r.stdout, "w2")
    assert within(a["mbit"], 20), a
    assert within(b["mbit"], 30), b


def test_time_trace_step_is_measured(state_dir: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    r = launch("-n", "2", "--trace", "step:20,80@3s,n=2", "--events-log", str(events), "--probe-s", "4.5",
               state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (res,) = json_lines(r.stdout, "w0")
    (change,) = [e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "rate"]
    # each sample covers the 0.25 s before its time; compare both sides of the change, away from it
    at = change["wall"] - res["start_wall"]
    low = [m for t, m in res["series"] if 0.5 <= t <= at - 0.1]
    high = [m for t, m in res["series"] if at + 0.6 <= t]
    assert len(low) >= 2 and len(high) >= 2, (r.stderr, at, res["series"])
    assert within(statistics.median(low), 20), res["series"]
    assert within(statistics.median(high), 80), res["series"]


def test_iteration_trace_step_is_synchronous(state_dir: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    r = launch("-n", "2", "--trace", "step:20,80@4it,n=2", "--events-log", str(events), "--",
               sys.executable, str(HERE / "_iter_transfer.py"), "1000000", "8", state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (res,) = json_lines(r.stdout, "w1")
    rates = res["mbit_per_iter"]
    # the first iteration of each phase pays for TCP ramp-up; the others run at the phase's rate
    assert within(statistics.median(rates[1:4]), 20), rates
    assert within(statistics.median(rates[5:8]), 80, 0.25), rates
    log = [json.loads(l) for l in events.read_text().splitlines()]
    (change,) = [e for e in log if e["event"] == "rate"]
    assert change["iteration"] == 4 and change["up_mbit"] == 80.0


def test_competing_flow_takes_bandwidth(state_dir: Path) -> None:
    r = launch("-n", "3", "--bandwidth-mbit", "100", "--flow", "at=1s,src=2,dst=0,s=1.5", "--probe-s", "3.5",
               state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (res,) = json_lines(r.stdout, "w0")
    (flow,) = json_lines(r.stdout, "flow0-rx")
    before = statistics.median(m for t, m in res["series"] if t <= 0.8)
    during = statistics.median(m for t, m in res["series"] if 1.4 <= t <= 2.3)
    assert within(before, 100), res["series"]
    assert during < 0.75 * before, res["series"]
    assert 10 < flow["flow0"]["mbit"] < 90, flow


def test_python_api_reshapes_with_tc_change() -> None:
    before = host_snapshot()
    with Testbed(2, bandwidth_mbit=20) as tb:
        ns = tb.namespace(1)

        def tbf_rates() -> str:
            return subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", tb.ifname(1)],
                                  capture_output=True, text=True).stdout

        assert "tbf" in tbf_rates() and "rate 20Mbit" in tbf_rates()
        tb.set_rates(80, 40, ranks=[1])
        assert "rate 80Mbit" in tbf_rates()
        bridge = subprocess.run(["tc", "-n", tb.network.bridge_namespace, "qdisc", "show"],
                                capture_output=True, text=True).stdout
        assert "rate 40Mbit" in bridge and "rate 20Mbit" in bridge  # rank 1 down, rank 0 down
        made = {n for n in host_snapshot()["netns"] if n.startswith(tb.network.prefix)}
        assert made == {tb.network.bridge_namespace, tb.namespace(0), tb.namespace(1)}
        prefix = tb.network.prefix
    after = host_snapshot()
    assert not {n for n in after["netns"] if n.startswith(prefix)}
    assert after["links"] == before["links"] and after["qdiscs"] == before["qdiscs"]


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _start_sleeping_launcher(state_dir: Path) -> tuple[subprocess.Popen[bytes], dict]:
    p = subprocess.Popen([*LAUNCH, "--state-dir", str(state_dir), "-n", "2", "--bandwidth-mbit", "100",
                          "--", "sleep", "60"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        files = list(state_dir.glob("ab*.json"))
        if files:
            state = json.loads(files[0].read_text())
            workers = [n for n in state["namespaces"] if "-w" in n]
            if state.get("socket") and len(workers) == 2 and all(namespace_pids(n) for n in workers):
                return p, state
        time.sleep(0.1)
    p.kill()
    raise AssertionError("launcher did not start its workers in 30 s")


def test_cleanup_after_sigkill_leaves_nothing(state_dir: Path) -> None:
    before = host_snapshot()
    p, state = _start_sleeping_launcher(state_dir)
    ours = set(state["namespaces"])
    worker_pids = [pid for n in ours for pid in namespace_pids(n)]
    assert ours <= host_snapshot()["netns"]
    assert "tbf" in subprocess.run(["tc", "-n", f"{state['prefix']}-br", "qdisc", "show"],
                                   capture_output=True, text=True).stdout
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert ours <= host_snapshot()["netns"]  # the launcher had no chance to clean up
    r = launch("--cleanup", state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    assert f"removed testbed run {state['prefix']}" in r.stdout
    after = host_snapshot()
    assert not ours & after["netns"]
    assert not {n for n in after["netns"] if n.startswith(state["prefix"])}
    assert after["links"] == before["links"]
    assert after["qdiscs"] == before["qdiscs"]
    assert not list(state_dir.iterdir())  # state file and socket removed
    time.sleep(0.2)
    assert worker_pids and all(_dead(pid) for pid in worker_pids)
    r = launch("--cleanup", state_dir=state_dir)
    assert r.returncode == 0 and "nothing to clean up" in r.stdout


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_clean_up(state_dir: Path, sig: int, code: int) -> None:
    before = host_snapshot()
    p, state = _start_sleeping_launcher(state_dir)
    p.send_signal(sig)
    assert p.wait(30) == code
    after = host_snapshot()
    assert not set(state["namespaces"]) & after["netns"]
    assert after["links"] == before["links"] and after["qdiscs"] == before["qdiscs"]
    assert not list(state_dir.iterdir())


def test_timeout_and_failure_clean_up(state_dir: Path) -> None:
    before = host_snapshot()
    t0 = time.monotonic()
    r = launch("-n", "2", "--bandwidth-mbit", "100", "--timeout-s", "1", "--", "sleep", "30", state_dir=state_dir)
    assert r.returncode == 124 and "timeout after 1 s" in r.stderr
    assert time.monotonic() - t0 < 15
    r = launch("-n", "2", "--", "sh", "-c", "exit $((RANK * 3))", state_dir=state_dir)
    assert r.returncode == 3 and "w1 (worker) exited with code 3" in r.stderr
    after = host_snapshot()
    assert after["netns"] <= before["netns"] | {n for n in after["netns"] if not n.startswith("ab")}
    assert not list(state_dir.iterdir())


def test_worker_environment(state_dir: Path) -> None:
    code = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
            "['RANK','WORLD_SIZE','LOCAL_RANK','MASTER_ADDR','MASTER_PORT','GLOO_SOCKET_IFNAME',"
            "'AUTOBYTE_TESTBED_CONTROL']}))")
    r = launch("-n", "2", "--master-port", "29611", "--", sys.executable, "-c", code, state_dir=state_dir)
    assert r.returncode == 0, r.stderr
    (e0,) = json_lines(r.stdout, "w0")
    (e1,) = json_lines(r.stdout, "w1")
    assert (e0["RANK"], e1["RANK"], e0["WORLD_SIZE"], e1["LOCAL_RANK"]) == ("0", "1", "2", "0")
    assert e0["MASTER_ADDR"] == e1["MASTER_ADDR"] == f"{SUBNET}.1" and e1["MASTER_PORT"] == "29611"
    assert e0["GLOO_SOCKET_IFNAME"].endswith("w0") and e1["GLOO_SOCKET_IFNAME"].endswith("w1")
    assert e0["AUTOBYTE_TESTBED_CONTROL"].endswith(".sock")


def test_cleanup_refuses_what_it_did_not_create(state_dir: Path) -> None:
    prefix = "ab" + secrets.token_hex(3)
    foreign = f"{prefix}-w0"  # named like ours, but holds an interface we did not make
    plain = f"abtest{secrets.token_hex(3)}"  # not named like ours at all
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    subprocess.run(["ip", "netns", "add", plain], check=True)
    try:
        subprocess.run(["ip", "-n", foreign, "link", "add", "userveth0", "type", "veth", "peer", "name", "userveth1"],
                       check=True)
        (state_dir / f"{prefix}.json").write_text(json.dumps(
            {"version": 1, "prefix": prefix, "launcher_pid": 0, "namespaces": [foreign, plain]}))
        r = launch("--cleanup", state_dir=state_dir)
        assert r.returncode == 1
        assert f"refused to delete namespace '{foreign}': it holds interfaces this run did not create" in r.stderr
        assert f"refused to touch namespace '{plain}'" in r.stderr
        assert {foreign, plain} <= host_snapshot()["netns"]
        assert (state_dir / f"{prefix}.json").exists()  # kept: the run is not cleaned
    finally:
        subprocess.run(["ip", "netns", "delete", foreign])
        subprocess.run(["ip", "netns", "delete", plain])


def test_delay_needs_netem(state_dir: Path) -> None:
    has_netem = subprocess.run(["sh", "-c", "zcat /proc/config.gz 2>/dev/null | grep -q '^CONFIG_NET_SCH_NETEM=[ym]'"]).returncode == 0
    r = launch("-n", "2", "--bandwidth-mbit", "100", "--delay-ms", "20", "--", sys.executable, "-c",
               "import os, socket, time, json\n"
               "r = int(os.environ['RANK']); a = os.environ['MASTER_ADDR']\n"
               "if r == 0:\n s = socket.create_server((a, 6200)); c, _ = s.accept()\n"
               " for _ in range(5): c.sendall(c.recv(1))\n"
               "else:\n time.sleep(0.5); c = socket.create_connection((a, 6200)); ts = []\n"
               " for _ in range(5):\n  t = time.perf_counter(); c.sendall(b'x'); c.recv(1); ts.append(time.perf_counter() - t)\n"
               " print(json.dumps({'rtt_ms': 1000 * min(ts)}))\n",
               state_dir=state_dir)
    if has_netem:
        assert r.returncode == 0, r.stderr
        (res,) = json_lines(r.stdout, "w1")
        assert 35 <= res["rtt_ms"] <= 60, res  # 20 ms each way
    else:
        assert r.returncode == 1
        assert "delay_ms=20 needs the netem qdisc, which this kernel does not have" in r.stderr
    assert not list(state_dir.iterdir())


def test_gloo_allreduce_through_autobyte_launch(state_dir: Path, tmp_path: Path) -> None:
    """The CI smoke run: 2 gloo ranks in 2 namespaces, a few iterations, one bandwidth change."""
    pytest.importorskip("torch")
    events = tmp_path / "events.jsonl"
    r = launch("-n", "2", "--trace", "step:50,500@2it,n=2", "--events-log", str(events), "--timeout-s", "120",
               "--", sys.executable, str(HERE / "_allreduce.py"), "4",
               state_dir=state_dir, timeout=150, module=[sys.executable, "-m", "autobyte.cli", "launch"])
    assert r.returncode == 0, r.stdout + r.stderr
    (res,) = json_lines(r.stdout, "w0")
    assert res["ok"] is True and res["world"] == 2
    assert res["addrs"] == [f"{SUBNET}.1", f"{SUBNET}.2"]
    log = [json.loads(l) for l in events.read_text().splitlines()]
    assert [e["iteration"] for e in log if e["event"] == "iteration"] == [0, 1, 2, 3]
    (change,) = [e for e in log if e["event"] == "rate"]
    assert change["iteration"] == 2 and change["up_mbit"] == 500.0
    assert not list(state_dir.iterdir())


def test_mxnet_parameter_server_roles(state_dir: Path) -> None:
    pytest.importorskip("mxnet")
    r = launch("-n", "2", "--bandwidth-mbit", "200", "--ps", "--timeout-s", "120", "--",
               sys.executable, str(HERE / "_ps.py"), state_dir=state_dir, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    results = json_lines(r.stdout, "w0") + json_lines(r.stdout, "w1")
    assert len(results) == 2 and all(x["ok"] and x["num_workers"] == 2 for x in results)
    assert sorted(x["rank"] for x in results) == [0, 1]


def test_launcher_crash_cleans_up(state_dir: Path) -> None:
    """An error inside the launcher mid-run (here: a tc change that fails) still removes everything."""
    before = host_snapshot()
    p = subprocess.Popen([*LAUNCH, "--state-dir", str(state_dir), "-n", "2", "--trace", "step:100,50@2s,n=2",
                          "--", "sleep", "60"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    state: dict = {}
    while time.monotonic() < deadline and not state.get("socket"):
        files = list(state_dir.glob("ab*.json"))
        state = json.loads(files[0].read_text()) if files else {}
        time.sleep(0.05)
    # pull the bridge away: the veths die with it, so the trace's tc change at 2 s fails
    subprocess.run(["ip", "netns", "delete", f"{state['prefix']}-br"], check=True)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert "autobyte launch: error:" in err and "failed" in err
    after = host_snapshot()
    assert not {n for n in after["netns"] if n.startswith(state["prefix"])}
    assert after["links"] == before["links"] and after["qdiscs"] == before["qdiscs"]
    assert not list(state_dir.iterdir())
