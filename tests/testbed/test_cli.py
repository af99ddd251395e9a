"""``autobyte launch`` input checks and the non-root error (no root needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autobyte.testbed import Testbed

from .conftest import REPO, launch


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bandwidth-mbit", "0", "--", "true"], "--bandwidth-mbit must be a positive number of Mbit/s, but got --bandwidth-mbit=0.0."),
        (["--bandwidth-mbit", "-5", "--", "true"], "--bandwidth-mbit must be a positive number of Mbit/s, but got --bandwidth-mbit=-5.0."),
        (["--up-mbit", "10", "--down-mbit", "0", "--", "true"], "--down-mbit must be a positive number of Mbit/s, but got --down-mbit=0.0."),
        (["--trace", "step:100,fast@2it", "--", "true"], "bad trace 'step:100,fast@2it'"),
        (["--trace", "step:100,0@2it", "--", "true"], "up_mbit must be a positive number of Mbit/s, but got up_mbit=0.0."),
        (["--trace", "const:10", "--bandwidth-mbit", "5", "--", "true"], "give either trace or bandwidth_mbit, not both."),
        (["--flow", "at=1s,src=0,dst=0,s=1", "--bandwidth-mbit", "5", "--", "true"], "src and dst must be different ranks"),
        (["--flow", "at=1s,src=0,dst=1,s=1", "--", "true"], "--flow needs shaped links"),
        (["-n", "0", "--", "true"], "--n-workers must be an integer in [1, 250], but got --n-workers=0."),
        (["--up-mbit", "10", "--", "true"], "give both up_mbit and down_mbit"),
        (["--delay-ms", "-1", "--", "true"], "--delay-ms must be >= 0, but got --delay-ms=-1.0."),
        (["--timeout-s", "0", "--", "true"], "--timeout-s must be a positive number of seconds, but got --timeout-s=0.0."),
        (["--probe-s", "2", "--", "true"], "give either --probe-s or a command, not both."),
        ([], "no command given"),
    ],
)
@pytest.mark.integration
def test_bad_inputs_are_rejected(args: list[str], message: str, tmp_path: Path) -> None:
    r = launch(*args, state_dir=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not list(tmp_path.iterdir())  # nothing was created


def test_python_api_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"bandwidth_mbit must be a positive number of Mbit/s, but got bandwidth_mbit=0.0"):
        Testbed(2, bandwidth_mbit=0)
    with pytest.raises(ValueError, match=r"delay_ms must be a number of milliseconds in \[0, 10000\], but got delay_ms=-2"):
        Testbed(2, delay_ms=-2)
    with pytest.raises(ValueError, match=r"command must be a non-empty list of arguments, but got command=''"):
        Testbed(2).run("")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"master_port must be a TCP port in \[1, 65535\], but got master_port=0"):
        Testbed(2).run(["true"], master_port=0)


_NONROOT = (
    "import os, sys\n"
    "from autobyte.testbed import _cli\n"
    "import autobyte.cli  # noqa: F401 (imported before the drop)\n"
    "if os.geteuid() == 0:\n"
    "    os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    "sys.exit(_cli.main(sys.argv[1:]))\n"
)


@pytest.mark.integration
@pytest.mark.parametrize("args", [["-n", "2", "--bandwidth-mbit", "10", "--", "true"], ["--cleanup"]])
def test_non_root_gets_a_clear_error(args: list[str], tmp_path: Path) -> None:
    # a real unprivileged process: as root, the child drops to uid 65534 after importing
    r = subprocess.run([sys.executable, "-c", _NONROOT, "--state-dir", str(tmp_path), *args],
                       capture_output=True, text=True, cwd=REPO, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 1, r.stderr
    assert "the autobyte testbed needs root" in r.stderr
    assert f"runs as uid {os.geteuid() or 65534}" in r.stderr
    assert not list(tmp_path.iterdir())
