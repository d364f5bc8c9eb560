"""On demand: an Instance against a Space as slow as a real one (minutes, not seconds).

Skipped unless ``REAL_SPACE_TIMINGS=1``: a real first control plane takes
about five minutes to provision (issue 26, from Upbound's Cloud), so this is
no part of the default ``make test``. The delays are settable
(``REAL_SPACE_PROVISIONING_SECONDS``, ``REAL_SPACE_DELETION_SECONDS``); the
figures it prints go into bench/RESULTS.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.spaces import Kube, SpacesSimulator, condition, provider, wait_for
from tests.provider.conftest import Env, connect_to_space
from tests.provider.test_instance import fresh, get, instance, ready

pytestmark = [
    pytest.mark.real_timings,
    pytest.mark.skipif(
        os.environ.get("REAL_SPACE_TIMINGS") != "1", reason="REAL_SPACE_TIMINGS=1 runs it"
    ),
]
PROVISIONING = float(os.environ.get("REAL_SPACE_PROVISIONING_SECONDS", "300"))
# How long a real Space takes to delete one is not documented: a guess, settable.
DELETION = float(os.environ.get("REAL_SPACE_DELETION_SECONDS", "60"))
SLACK = 120.0


@pytest.fixture(scope="module")
def slow(kube_etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    logs = tmp_path_factory.mktemp("real-timings")
    with APIServerFactory(kube_etcd) as factory:
        local = Kube(factory(name="local"))
        space = Kube(factory(name="space"))
        hosted = factory(name="hosted")
        connect_to_space(local, space)
        with (
            SpacesSimulator(
                space,
                hosted,
                provisioning_delay=PROVISIONING,
                deletion_delay=DELETION,
            ) as simulator,
            provider(
                local.server.kubeconfig_path,
                Path(logs) / "provider.log",
                "--poll",
                "30s",
            ) as process,
        ):
            yield Env(local, space, hosted, simulator, process, factory)


def test_an_instance_waits_out_a_real_first_provisioning_and_deletion(slow: Env) -> None:
    namespace = fresh(slow, "slow")
    started = time.monotonic()
    slow.local.create("instances", instance(namespace))
    creating = wait_for(
        "Ready=False, Creating",
        lambda: condition(get(slow, namespace), "Ready").get("reason") == "Creating",
    )
    assert creating
    wait_for("Ready", lambda: ready(slow, namespace), timeout=PROVISIONING + SLACK)
    to_ready = time.monotonic() - started
    assert to_ready >= PROVISIONING

    deleting = time.monotonic()
    slow.local.delete("instances", namespace, "myctp")
    wait_for("the Instance gone", lambda: get(slow, namespace) is None, timeout=DELETION + SLACK)
    to_gone = time.monotonic() - deleting
    assert to_gone >= DELETION
    print(
        f"\nreal timings: provisioning {PROVISIONING:.0f}s, Instance Ready after {to_ready:.1f}s; "
        f"deletion {DELETION:.0f}s, Instance gone after {to_gone:.1f}s"
    )
