"""The engine contract (:mod:`autobyte.testing.engine_contract`) for every shipped engine, on real ranks.

torch: 2 CPU processes on gloo; kvstore: a loopback ``dist_sync`` parameter
server (scheduler, server, 2 workers); horovod: ``horovodrun --gloo``, where
``horovod.mxnet`` is installed. An engine whose framework is absent is skipped
with the reason.
"""

from __future__ import annotations

import pytest

from autobyte.testing import engine_contract as ec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", params=sorted(ec.HARNESSES))
def harness(request: pytest.FixtureRequest) -> ec.Harness:
    h = ec.HARNESSES[request.param]()
    reason = h.unavailable()
    if reason is not None:
        pytest.skip(f"{request.param} engine: {reason}")
    return h


def test_bad_input_is_refused_naming_the_argument(harness):
    ec.check_bad_input(harness)


def test_matches_the_unscheduled_path(harness, tmp_path):
    ec.check_matches_unscheduled(harness, tmp_path)


def test_reconfigures_at_an_agreed_iteration(harness, tmp_path):
    ec.check_reconfigures_at_an_agreed_iteration(harness, tmp_path)


def test_rank_skew_never_hangs(harness, tmp_path):
    ec.check_rank_skew(harness, tmp_path)


def test_lost_peer_is_a_clear_error_within_timeout(harness, tmp_path):
    ec.check_lost_peer(harness, tmp_path)
