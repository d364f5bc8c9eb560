"""A round trip over gRPC against the real server, as Crossplane makes it."""

from __future__ import annotations

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from function.render import request
from tests import builders as b
from tests.servers import function_server

TIMEOUT_SECONDS = 10


def call(address: str, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """RunFunction over a fresh channel, as Crossplane calls it."""
    with grpc.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
        rsp: fnv1.RunFunctionResponse = stub.RunFunction(req, timeout=TIMEOUT_SECONDS)
        return rsp


def test_the_server_composes_a_composite_over_grpc(function_address: str) -> None:
    req = request(
        b.composite({"source": b.SOURCE, "backup": b.BACKUP}),
        b.example_input(),
        [b.ready({"metadata": {"annotations": {b.COMPOSITION_RESOURCE_NAME: "instance"}}})],
    )
    req.meta.tag = "round-trip"
    rsp = call(function_address, req)
    assert rsp.meta.tag == "round-trip"
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert "kustomization" in rsp.desired.resources
    assert rsp.desired.resources["instance"].ready == fnv1.READY_TRUE
    instance = resource.struct_to_dict(rsp.desired.resources["instance"].resource)
    assert instance["metadata"] == {"name": "myctp", "namespace": "team-a"}
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["instance"]["ready"] is True
    assert {c.type for c in rsp.conditions} == {"InstanceReady", "SourceSynced", "BackupsReady"}
    assert all(c.target == fnv1.TARGET_COMPOSITE_AND_CLAIM for c in rsp.conditions)
    assert rsp.meta.ttl.seconds == 15


def test_the_server_answers_bad_input_with_a_fatal_result(function_address: str) -> None:
    req = request(b.composite({"channel": "None"}), b.example_input())
    rsp = call(function_address, req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "spec: channel None needs crossplaneVersion to be set")
    ]
    assert not rsp.desired.resources


def test_the_server_also_serves_the_v1beta1_api_older_crossplanes_call(
    function_address: str,
) -> None:
    req = fnv1beta1.RunFunctionRequest()
    req.ParseFromString(request(b.composite({}), b.example_input()).SerializeToString())
    with grpc.insecure_channel(function_address) as channel:
        stub = grpcv1beta1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
        rsp = stub.RunFunction(req, timeout=TIMEOUT_SECONDS)
    assert list(rsp.desired.resources) == ["instance"]


def test_the_server_refuses_to_start_without_credentials_or_insecure() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("function-controlplane")
    result = subprocess.run(
        [str(script), "serve", "--address", "127.0.0.1:0"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"pass --tls-certs-dir DIR (with tls.crt, tls.key and ca.crt) or --insecure" in (
        result.stderr
    )
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--address", "--insecure", "--tls-certs-dir", "--debug"])
def test_serve_takes_the_sdks_standard_flags(flag: str) -> None:
    from click.testing import CliRunner

    from function.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    assert flag in result.output


def test_a_server_with_a_response_cache_answers_repeats_and_changes_each_with_its_own_tag() -> None:
    first = request(b.composite({"source": b.SOURCE}), b.example_input())
    first.meta.tag = "first"
    repeat = fnv1.RunFunctionRequest()
    repeat.CopyFrom(first)
    repeat.meta.tag = "repeat"
    changed = request(b.composite({"source": b.SOURCE, "class": "large"}), b.example_input())
    with function_server("--cache-entries", "8", "--cache-mib", "1") as address:
        answers = [call(address, req) for req in (first, repeat, changed)]
    assert [a.meta.tag for a in answers] == ["first", "repeat", ""]
    answers[1].meta.tag = "first"
    assert answers[1] == answers[0]
    instance = resource.struct_to_dict(answers[2].desired.resources["instance"].resource)
    assert instance["spec"]["forProvider"]["class"] == "large"
