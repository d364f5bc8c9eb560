"""Bad input: a Fatal result that names the field path and the rule, and nothing lost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function.render import request
from tests import builders as b

PREVIOUS_STEP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}}


@dataclass
class BadCase:
    reason: str
    spec: dict[str, Any]
    want: tuple[str, ...]  # every fragment the Fatal message must contain
    function_input: dict[str, Any] | None = None
    no_input: bool = False
    never: tuple[str, ...] = ()  # fragments the message must not contain
    composite: dict[str, Any] | None = None  # the whole composite, when not a v2 one of spec


def _input(**changes: Any) -> dict[str, Any]:
    data = b.example_input()
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return data


def _staged(*stages: dict[str, Any]) -> dict[str, Any]:
    return {"source": {**b.SOURCE, "stages": list(stages)}}


def _legacy(
    spec: dict[str, Any],
    *,
    labels: dict[str, str] | None = None,
    claim_namespace: str | None = None,
) -> dict[str, Any]:
    """A legacy composite's spec, bound to a claim in ``claim_namespace`` when one is given."""
    body = b.composite(spec, namespace=None)
    body["metadata"]["labels"] = labels or {}
    if claim_namespace is not None:
        body["spec"]["claimRef"] = {
            "apiVersion": "legacy.platform.acme.io/v1alpha1",
            "kind": "ControlPlane",
            "name": "myctp",
            "namespace": claim_namespace,
        }
    return body


BAD_CASES = [
    BadCase(
        "A file:// URL is refused: only http, https and ssh reach a git server.",
        {"source": {"url": "file:///etc/passwd"}},
        ("spec.source.url", "http, https or ssh", "'file'"),
    ),
    BadCase(
        "A git:// URL is refused: the git protocol is unauthenticated.",
        {"source": {"url": "git://github.com/acmeorg/x"}},
        ("spec.source.url", "http, https or ssh", "'git'"),
    ),
    BadCase(
        "A URL without a host is refused.",
        {"source": {"url": "https:///path"}},
        ("spec.source.url", "must name a host"),
    ),
    BadCase(
        "A password in the URL is refused: credentials belong in spec.source.secretRef.",
        {"source": {"url": "https://alice:s3cr3t-pa55@github.com/acmeorg/x"}},
        ("spec.source.url", "must not carry credentials", "spec.source.secretRef"),
    ),
    BadCase(
        "An empty password field is a password field too.",
        {"source": {"url": "https://alice:@github.com/acmeorg/x"}},
        ("spec.source.url", "must not carry credentials"),
    ),
    BadCase(
        "A password in an ssh URL is refused as well.",
        {"source": {"url": "ssh://git:s3cr3t-pa55@github.com/acmeorg/x"}},
        ("spec.source.url", "must not carry credentials"),
    ),
    BadCase(
        "Two refs are refused.",
        {"source": {"url": "https://x.example/r", "ref": {"branch": "main", "tag": "v1"}}},
        ("spec.source.ref", "exactly one of branch, tag, semver, commit", "branch, tag"),
    ),
    BadCase(
        "An empty ref is refused.",
        {"source": {"url": "https://x.example/r", "ref": {}}},
        ("spec.source.ref", "exactly one of", "got none"),
    ),
    BadCase(
        "A sync interval under 10s is refused.",
        {"source": {"url": "https://x.example/r", "interval": "5s"}},
        ("spec.source.interval", "at least 10s", "5s"),
    ),
    BadCase(
        "A sync interval that is no duration is refused.",
        {"source": {"url": "https://x.example/r", "interval": "often"}},
        ("spec.source.interval", "must be a duration"),
    ),
    BadCase(
        "A timeout in hours is refused: Flux's GitRepository takes ms, s or m.",
        {"source": {"url": "https://x.example/r", "timeout": "1h"}},
        ("spec.source.timeout", "ms, s, m", "'1h'"),
    ),
    BadCase(
        "An unknown field in the source is a typo, refused by name.",
        {"source": {"url": "https://x.example/r", "branch": "main"}},
        ("spec.source.branch", "is not a known field"),
    ),
    BadCase(
        "A cron of four fields is refused.",
        {"backup": {"schedule": "0 */6 * *"}},
        ("spec.backup.schedule", "5 fields"),
    ),
    BadCase(
        "A cron minute out of range is refused.",
        {"backup": {"schedule": "60 * * * *"}},
        ("spec.backup.schedule", "minute must be within 0-59"),
    ),
    BadCase(
        "A cron step without * or a range before it is refused, as cron refuses it.",
        {"backup": {"schedule": "5/10 * * * *"}},
        ("spec.backup.schedule", "step needs * or a range"),
    ),
    BadCase(
        "A cron that never fires is refused.",
        {"backup": {"schedule": "0 0 31 2 *"}},
        ("spec.backup.schedule", "never fires"),
    ),
    BadCase(
        "An unknown cron macro is refused.",
        {"backup": {"schedule": "@yearly"}},
        ("spec.backup.schedule", "@hourly, @daily, @weekly"),
    ),
    BadCase(
        "@every under a minute is refused: backups fire at minute resolution.",
        {"backup": {"schedule": "@every 30s"}},
        ("spec.backup.schedule", "whole number of minutes, at least 1m"),
    ),
    BadCase(
        "@every without a unit is refused.",
        {"backup": {"schedule": "@every 6"}},
        ("spec.backup.schedule", "must be a duration"),
    ),
    BadCase(
        "A ttl that is no duration is refused.",
        {"backup": {"ttl": "7d"}},
        ("spec.backup.ttl", "must be a duration"),
    ),
    BadCase(
        "A bucket name S3 would refuse is refused here first.",
        {"backup": {"bucket": {"name": "Bad_Bucket"}}},
        ("spec.backup.bucket.name", "S3 bucket name"),
    ),
    BadCase(
        "An existing bucket the input does not allow is refused: it may be another team's.",
        {"backup": {"bucket": {"name": "platform-audit-logs"}}},
        ("spec.backup.bucket.name", "backup.allowedBuckets allows", "leave it unset"),
        never=("platform-audit-logs", b.SHARED_BUCKET),
    ),
    BadCase(
        "No existing bucket is allowed when the input lists none, the default.",
        {"backup": {"bucket": {"name": b.SHARED_BUCKET}}},
        ("spec.backup.bucket.name", "none unless the operator lists them"),
        function_input=_input(backup__allowedBuckets=None),
        never=(b.SHARED_BUCKET,),
    ),
    BadCase(
        "A git host on loopback is refused under the default *.",
        {"source": {"url": "https://alice@127.0.0.1:8443/acmeorg/x"}},
        ("spec.source.url", "a loopback address", "source.allowedHosts lists it explicitly"),
        never=("alice", "127.0.0.1", "8443"),
    ),
    BadCase(
        "The cloud metadata address is refused: it is link-local.",
        {"source": {"url": "https://169.254.169.254/latest/meta-data"}},
        ("spec.source.url", "a link-local address"),
        never=("169.254",),
    ),
    BadCase(
        "A private address is refused under the default *.",
        {"source": {"url": "ssh://git@[fd12:3456::1]/acmeorg/x"}},
        ("spec.source.url", "a private address"),
        never=("fd12",),
    ),
    BadCase(
        "A Service of the cluster is refused under the default *.",
        {"source": {"url": "https://gitea.platform.svc.cluster.local/acmeorg/x"}},
        ("spec.source.url", "a cluster-internal or private name"),
        never=("gitea",),
    ),
    BadCase(
        "A name without a dot is refused: the pod's DNS search path makes it a Service.",
        {"source": {"url": "https://gitea/acmeorg/x"}},
        ("spec.source.url", "a name without a dot"),
    ),
    BadCase(
        "Plain http is refused unless the input allows it.",
        {"source": {"url": "http://github.com/acmeorg/x"}},
        ("spec.source.url", "plain http", "source.allowHTTP"),
        never=("acmeorg",),
    ),
    BadCase(
        "A host the input does not list is refused when the input lists hosts instead of *.",
        {"source": {"url": "https://github.com/acmeorg/x"}},
        ("spec.source.url", "not one the function input's source.allowedHosts allows"),
        function_input=_input(source__allowedHosts=["git.acme.example"]),
        never=("github.com", "git.acme.example"),
    ),
    BadCase(
        "A port that is no number is refused.",
        {"source": {"url": "https://github.com:https/acmeorg/x"}},
        ("spec.source.url", "port from 0 to 65535"),
    ),
    BadCase(
        "An unknown channel is refused.",
        {"channel": "Beta"},
        ("spec.channel", "'None', 'Patch', 'Stable' or 'Rapid'"),
    ),
    BadCase(
        "Channel None without a version is refused.",
        {"channel": "None"},
        ("spec", "channel None needs crossplaneVersion"),
    ),
    BadCase(
        "A version with a leading v is refused.",
        {"crossplaneVersion": "v2.1.4-up.2"},
        ("spec.crossplaneVersion", "no leading v"),
    ),
    BadCase(
        "A restore naming neither a Backup nor a control plane is refused.",
        {"restore": {}},
        ("spec.restore", "exactly one of backupName, fromControlPlane", "got none"),
    ),
    BadCase(
        "A restore naming both a Backup and a control plane is refused.",
        {"restore": {"backupName": "myctp-backup-1", "fromControlPlane": "myctp"}},
        ("spec.restore", "exactly one of backupName, fromControlPlane", "got backupName, "),
    ),
    BadCase(
        "A restore from a control plane that is no valid Kubernetes name is refused.",
        {"restore": {"fromControlPlane": "My CTP"}},
        ("spec.restore.fromControlPlane", "DNS subdomain"),
    ),
    BadCase(
        "A restore naming no valid Kubernetes object is refused.",
        {"restore": {"backupName": "Not A Name"}},
        ("spec.restore.backupName", "DNS subdomain"),
    ),
    BadCase(
        "A restore that is not an object is refused.",
        {"restore": "myctp-backup-1"},
        ("spec.restore", "valid dictionary"),
    ),
    BadCase(
        "A missing input is refused.",
        {},
        ("input", "controlplane.fn.acme.io/v1beta1 Input is required"),
        no_input=True,
    ),
    BadCase(
        "An input of another kind is refused.",
        {},
        ("input.kind", "'Input'"),
        function_input=_input(kind="Composition"),
    ),
    BadCase(
        "An input that trusts two mechanisms is refused.",
        {"backup": {}},
        ("input.backup.trust", "exactly one of irsa, podIdentity, roleArn", "irsa, podIdentity"),
        function_input=_input(
            backup__trust__podIdentity={
                "controllerRoleArn": "arn:aws:iam::123456789012:role/controlplane-backup"
            }
        ),
    ),
    BadCase(
        "Pod Identity trust without the controller's role is refused.",
        {"backup": {}},
        ("input.backup.trust.podIdentity.controllerRoleArn", "is required"),
        function_input=_input(backup__trust={"podIdentity": {}}),
    ),
    BadCase(
        "An input with a malformed region is refused.",
        {},
        ("input.aws.region", "AWS region"),
        function_input=_input(aws__region="Europe"),
    ),
    BadCase(
        "An input's bucket pattern with characters no bucket name has is refused.",
        {},
        ("input.backup.allowedBuckets[1]", "bucket name pattern", "'acme_*'"),
        function_input=_input(backup__allowedBuckets=["acme-*", "acme_*"]),
    ),
    BadCase(
        "An input's host pattern with a wildcard inside is refused.",
        {},
        ("input.source.allowedHosts[0]", "*.domain", "'git.*.example'"),
        function_input=_input(source__allowedHosts=["git.*.example"]),
    ),
    BadCase(
        "An input's host pattern with a port out of range is refused.",
        {},
        ("input.source.allowedHosts[0]", ":port", "'git.example:70000'"),
        function_input=_input(source__allowedHosts=["git.example:70000"]),
    ),
    BadCase(
        "An input's allowHTTP that is no boolean is refused.",
        {},
        ("input.source.allowHTTP", "boolean"),
        function_input=_input(source__allowHTTP="sometimes"),
    ),
    BadCase(
        "Backups without the input's backup settings are refused.",
        {"backup": {}},
        ("input.backup", "required when spec.backup is set"),
        function_input=_input(backup=None),
    ),
    BadCase(
        "A stage name that is no DNS label is refused.",
        _staged({"name": "Packages", "path": "./p"}),
        ("spec.source.stages[0].name", "a lowercase DNS label", "'Packages'"),
    ),
    BadCase(
        "Two stages of one name are refused.",
        _staged({"name": "a", "path": "./a"}, {"name": "a", "path": "./b"}),
        ("spec.source.stages[1].name", "stage names are unique"),
    ),
    BadCase(
        "A stage depending on a stage that does not exist is refused.",
        _staged({"name": "a", "path": "./a"}, {"name": "b", "path": "./b", "dependsOn": ["x"]}),
        ("spec.source.stages[1].dependsOn[0]", "'x' names no earlier stage"),
    ),
    BadCase(
        "A stage depending on a later stage is refused, so there is never a cycle.",
        _staged({"name": "a", "path": "./a", "dependsOn": ["b"]}, {"name": "b", "path": "./b"}),
        ("spec.source.stages[0].dependsOn[0]", "only on stages listed before it"),
    ),
    BadCase(
        "A stage depending on itself is refused.",
        _staged(
            {"name": "a", "path": "./a"}, {"name": "b", "path": "./b", "dependsOn": ["a", "b"]}
        ),
        ("spec.source.stages[1].dependsOn[1]", "'b' names itself"),
    ),
    BadCase(
        "More than eight stages are refused.",
        _staged(*({"name": f"s{i}", "path": f"./{i}"} for i in range(9))),
        ("spec.source.stages", "at most 8 items"),
    ),
    BadCase(
        "An empty list of stages is refused: leave stages out for one.",
        _staged(),
        ("spec.source.stages", "at least 1 item"),
    ),
    BadCase(
        "A stage without a path is refused.",
        _staged({"name": "a"}),
        ("spec.source.stages[0].path", "is required"),
    ),
    BadCase(
        "A health check without a current expression is refused.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [{"apiVersion": "x.io/v1", "kind": "T"}],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0].current", "is required"),
    ),
    BadCase(
        "A health check whose kind is no kind is refused.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [{"apiVersion": "x.io/v1", "kind": "thing", "current": "true"}],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0].kind", "a kind such as Provider"),
    ),
    BadCase(
        "A health check whose apiVersion has no version is refused.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [{"apiVersion": "x.io", "kind": "T", "current": "true"}],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0].apiVersion", "an apiVersion"),
    ),
    BadCase(
        "A stage's health check of a package kind the platform checks is refused: Flux takes "
        "one check per group and kind, whatever the version, and fails the whole stage else.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [
                    {
                        "apiVersion": "pkg.crossplane.io/v1beta1",
                        "kind": "Function",
                        "current": "true",
                    }
                ],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0]", "Function.pkg.crossplane.io", "one per kind"),
    ),
    BadCase(
        "Two health checks of one kind in a stage are refused.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [
                    {"apiVersion": "x.io/v1", "kind": "T", "current": "true"},
                    {"apiVersion": "x.io/v2", "kind": "T", "current": "false"},
                ],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[1]", "T.x.io", "one per kind"),
    ),
    BadCase(
        "Two health checks without kind of one group are refused: Flux keys both by the group "
        "alone and fails the whole stage.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [
                    {"apiVersion": "x.io/v1", "current": "true"},
                    {"apiVersion": "x.io/v2", "current": "false"},
                ],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[1]", "*.x.io", "one per kind"),
    ),
    BadCase(
        "An input health check of a kind the function's defaults check is refused.",
        {"source": b.SOURCE},
        ("input.source.healthCheckExprs[0]", "CompositeResourceDefinition", "one per kind"),
        function_input=_input(
            source__healthCheckExprs=[
                {
                    "apiVersion": "apiextensions.crossplane.io/v2",
                    "kind": "CompositeResourceDefinition",
                    "current": "true",
                }
            ]
        ),
    ),
    BadCase(
        "A team variable named like a platform variable is refused.",
        {"source": {**b.SOURCE, "substitute": {"CONTROLPLANE_NAME": "other"}}},
        ("spec.source.substitute.CONTROLPLANE_NAME", "is a platform variable"),
    ),
    BadCase(
        "A backup variable is the platform's even without spec.backup.",
        {"source": {**b.SOURCE, "substitute": {"BACKUP_BUCKET": "mine"}}},
        ("spec.source.substitute.BACKUP_BUCKET", "is a platform variable"),
    ),
    BadCase(
        "A team variable named like one of the input's variables is refused.",
        {"source": {**b.SOURCE, "substitute": {"REGION": "eu"}}},
        ("spec.source.substitute.REGION", "is a platform variable"),
        function_input=_input(source__variables={"REGION": "us"}),
    ),
    BadCase(
        "A variable name Flux cannot substitute is refused.",
        {"source": {**b.SOURCE, "substitute": {"MY-VAR": "x"}}},
        ("spec.source.substitute", "a variable name of letters, digits and _"),
    ),
    BadCase(
        "substituteFrom names only ConfigMaps and Secrets.",
        {"source": {**b.SOURCE, "substituteFrom": [{"kind": "Pod", "name": "x"}]}},
        ("spec.source.substituteFrom[0].kind", "'ConfigMap' or 'Secret'"),
    ),
    BadCase(
        "decryption needs the Secret with the keys.",
        {"source": {**b.SOURCE, "decryption": {}}},
        ("spec.source.decryption.secretRef", "is required"),
    ),
    BadCase(
        "The input may not set a variable the function sets itself.",
        {"source": b.SOURCE},
        ("input.source.variables", "CONTROLPLANE_NAMESPACE is set by the function itself"),
        function_input=_input(source__variables={"CONTROLPLANE_NAMESPACE": "x"}),
    ),
    BadCase(
        "A stage timeout above the input's maxTimeout is refused: a stage waiting for its "
        "health checks holds a kustomize-controller worker that long.",
        _staged({"name": "a", "path": "./a", "timeout": "10h"}),
        ("spec.source.stages[0].timeout", "at most 30m", "source.maxTimeout", "10h"),
    ),
    BadCase(
        "The source's own timeout is capped as well.",
        {"source": {**b.SOURCE, "timeout": "31m"}},
        ("spec.source.timeout", "at most 30m", "source.maxTimeout"),
    ),
    BadCase(
        "The operator's maxTimeout is the cap, whatever it is.",
        _staged({"name": "a", "path": "./a", "timeout": "6m"}),
        ("spec.source.stages[0].timeout", "at most 5m"),
        function_input=_input(source__maxTimeout="5m"),
    ),
    BadCase(
        "More stages than the input's maxStages are refused.",
        _staged(*({"name": f"s{n}", "path": f"./{n}"} for n in range(3))),
        ("spec.source.stages", "at most 2 stages", "source.maxStages", "got 3"),
        function_input=_input(source__maxStages=2),
    ),
    BadCase(
        "The input cannot raise maxStages past the contract's eight.",
        {"source": b.SOURCE},
        ("input.source.maxStages", "less than or equal to 8"),
        function_input=_input(source__maxStages=9),
    ),
    BadCase(
        "A costly current expression is refused naming the stage, the check and the field, "
        "never quoting it.",
        _staged(
            {"name": "a", "path": "./a"},
            {
                "name": "b",
                "path": "./b",
                "healthCheckExprs": [
                    {"apiVersion": "x.io/v1", "kind": "T", "current": "true"},
                    {
                        "apiVersion": "y.io/v1",
                        "kind": "U",
                        "current": "'xx'" + ".replace('x', 'xxxxxxxxxx')" * 8 + " == ''",
                    },
                ],
            },
        ),
        ("spec.source.stages[1].healthCheckExprs[1].current", "calls replace"),
        never=(".replace(",),
    ),
    BadCase(
        "The expressions of one composite are bounded together: the function parses them.",
        _staged(
            *(
                {
                    "name": f"s{n}",
                    "path": f"./{n}",
                    "healthCheckExprs": [
                        {
                            "apiVersion": "x.io/v1",
                            "kind": f"T{k}",
                            "current": "true || " * 500 + "true",
                        }
                        for k in range(3)
                    ],
                }
                for n in range(2)
            )
        ),
        ("spec.source.stages", "24024 characters", "more than the 16384"),
    ),
    BadCase(
        "inProgress is evaluated first by Flux, and checked the same way.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [
                    {
                        "apiVersion": "x.io/v1",
                        "kind": "T",
                        "current": "true",
                        "inProgress": "status.a + status.a == ''",
                    }
                ],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0].inProgress", "adds two values"),
    ),
    BadCase(
        "failed is checked the same way.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [
                    {
                        "apiVersion": "x.io/v1",
                        "kind": "T",
                        "current": "true",
                        "failed": "status.c.all(a, status.c.all(b, a == b))",
                    }
                ],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs[0].failed", "iterates inside an iteration"),
    ),
    BadCase(
        "With teamHealthChecks false the operator takes no team expression at all.",
        _staged(
            {
                "name": "a",
                "path": "./a",
                "healthCheckExprs": [{"apiVersion": "x.io/v1", "kind": "T", "current": "true"}],
            }
        ),
        ("spec.source.stages[0].healthCheckExprs", "source.teamHealthChecks is false"),
        function_input=_input(source__teamHealthChecks=False),
    ),
    BadCase(
        "teamHealthChecks is a switch: only a boolean turns it.",
        {"source": b.SOURCE},
        ("input.source.teamHealthChecks", "valid boolean"),
        function_input=_input(source__teamHealthChecks="no"),
    ),
    BadCase(
        "A team cannot name a ServiceAccount for decryption: only the keys in its Secret "
        "decrypt, never an identity of the controller's or another's.",
        {
            "source": {
                **b.SOURCE,
                "decryption": {"secretRef": {"name": "k"}, "serviceAccountName": "flux"},
            }
        },
        ("spec.source.decryption.serviceAccountName", "is not a known field"),
    ),
    BadCase(
        "A legacy composite whose claim-namespace label disagrees with its claim is refused: "
        "the label would pick another team's namespace.",
        {},
        ("metadata.labels[crossplane.io/claim-namespace]", "spec.claimRef.namespace"),
        composite=_legacy(
            {"source": b.SOURCE},
            labels={"crossplane.io/claim-namespace": "team-b"},
            claim_namespace="team-a",
        ),
    ),
    BadCase(
        "A legacy composite with a source and no claim is refused.",
        {},
        ("spec.claimRef", "spec.source", "bound to a claim"),
        composite=_legacy({"source": b.SOURCE}, labels={"crossplane.io/claim-namespace": "team-b"}),
    ),
    BadCase(
        "A legacy composite asking for a restore and no claim is refused: it would read the "
        "input namespace's Backups.",
        {},
        ("spec.claimRef", "spec.restore", "bound to a claim"),
        composite=_legacy({"restore": {"backupName": "b-1"}}),
    ),
    BadCase(
        "A claim-namespace label without any claim is refused too.",
        {},
        ("metadata.labels[crossplane.io/claim-namespace]", "bound to no claim"),
        composite=_legacy({}, labels={"crossplane.io/claim-namespace": "team-b"}),
    ),
    BadCase(
        "The input's health checks keep the same shape as a stage's.",
        {"source": b.SOURCE},
        ("input.source.healthCheckExprs[0].current", "is required"),
        function_input=_input(source__healthCheckExprs=[{"apiVersion": "x.io/v1", "kind": "T"}]),
    ),
]


def _request(case: BadCase) -> fnv1.RunFunctionRequest:
    function_input = None if case.no_input else (case.function_input or b.example_input())
    composite = case.composite or b.composite(case.spec)
    req = request(composite, function_input)
    req.desired.resources["from-a-previous-step"].resource.update(PREVIOUS_STEP)
    return req


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_bad_input_is_a_fatal_result_naming_the_field_and_the_rule(case: BadCase) -> None:
    rsp = fn.run(_request(case))
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1, case.reason
    for fragment in case.want:
        assert fragment in fatal[0], f"{case.reason}: {fragment!r} not in {fatal[0]!r}"
    for fragment in case.never:
        assert fragment not in fatal[0], f"{case.reason}: {fragment!r} in {fatal[0]!r}"
    assert "Traceback" not in fatal[0]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_bad_input_drops_no_desired_resource_and_adds_none(case: BadCase) -> None:
    rsp = fn.run(_request(case))
    assert list(rsp.desired.resources) == ["from-a-previous-step"]
    assert resource.struct_to_dict(rsp.desired.resources["from-a-previous-step"].resource) == (
        PREVIOUS_STEP
    )


@dataclass
class LeakCase:
    reason: str
    url: str


PASSWORD = "s3cr3t-pa55"
LEAK_CASES = [
    LeakCase("A password in the user-info part.", f"https://alice:{PASSWORD}@github.com/a/x"),
    LeakCase("A password and no host.", f"https://alice:{PASSWORD}@/a/x"),
    LeakCase("A password and a port.", f"https://alice:{PASSWORD}@github.com:443/a/x"),
]


@pytest.mark.parametrize("case", LEAK_CASES, ids=lambda case: case.reason)
def test_a_password_in_the_url_appears_in_no_result_nothing_composed_and_no_log(
    case: LeakCase, capsys: pytest.CaptureFixture[str]
) -> None:
    req = request(b.composite({"source": {"url": case.url}}), b.example_input())
    rsp = fn.run(req)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL], case.reason
    assert "spec.source.url" in rsp.results[0].message
    # Nothing of the answer (results, conditions, desired composite and
    # resources) and nothing logged holds the password.
    assert PASSWORD not in str(rsp), case.reason
    assert not rsp.desired.resources
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err


def test_a_user_name_alone_is_no_credential() -> None:
    req = request(
        b.composite({"source": {"url": "ssh://git@github.com/acmeorg/x"}}), b.example_input()
    )
    rsp = fn.run(req)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert "git-repository" in rsp.desired.resources


def test_a_composite_without_a_readable_name_is_a_fatal_result() -> None:
    req = request(b.composite({}), b.example_input())
    req.observed.composite.resource.update({"metadata": ["not", "an", "object"]})
    rsp = fn.run(req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "metadata.name: is required")
    ]


def test_an_unexpected_error_is_a_fatal_result_and_the_request_stays_out_of_the_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "s3cr3t-kubeconfig-token"

    def explode(*_: object) -> None:
        raise RuntimeError(secret)

    monkeypatch.setattr(fn, "compose", explode)
    req = request(b.composite({}), b.example_input())
    req.observed.resources["instance"].connection_details["kubeconfig"] = secret.encode()
    rsp = fn.run(req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "internal error while composing: RuntimeError")
    ]
    captured = capsys.readouterr()
    assert "cannot compose" in captured.out + captured.err
    assert secret not in captured.out + captured.err


def test_the_same_bad_input_is_a_fatal_result_every_time_it_comes() -> None:
    # The input is parsed once per distinct input; a failed parse must not be kept.
    bad_input = {**b.example_input(), "aws": {"region": "Mars"}}
    for _ in range(2):
        rsp = fn.run(request(b.composite({}), bad_input))
        assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
        assert "input.aws.region" in rsp.results[0].message
