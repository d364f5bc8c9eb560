"""The controllers' command lines: crossplane-runtime providers' flags and variables.

Parsing is tested without starting anything: click builds the command's
context from the arguments and environment, and the same function the command
calls turns it into ``Options``. A bad value must stop the command with a
usage error (exit 2) that names the flag and shows an example.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from provider.backup.restore.instance import RestoreBounds
from provider.backup.storage.web_identity import WebIdentityPolicy
from provider.cli import Options, backup_main, backup_options, main, provider_options
from provider.kube import ServiceAccountRef
from provider.kubeconfig import ControlPlaneHosts, HostPattern
from tests.schemas import ROOT

# The variables of the test runner's own environment that the commands read.
READ_FROM_ENVIRONMENT = (
    "KUBECONFIG",
    "LEADER_ELECTION",
    "POD_NAMESPACE",
    "METRICS_BIND_ADDRESS",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in READ_FROM_ENVIRONMENT or name.startswith("CONTROLPLANE_"):
            monkeypatch.delenv(name)


def parse(
    command: click.Command, args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Options:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with command.make_context(command.name, list(args)) as ctx:
        build = provider_options if command is main else backup_options
        return build(**ctx.params)


def _prefix(command: click.Command) -> str:
    """The prefix of the command's own variables."""
    return str(command.name).upper().replace("-", "_")


@dataclass
class GoodCase:
    reason: str
    args: list[str]
    want: dict[str, object]
    env: dict[str, str] = field(default_factory=dict)
    command: click.Command = main


GOOD_CASES = [
    GoodCase(
        "With no flags the provider polls every minute and resyncs every hour.",
        [],
        {
            "poll_interval": 60.0,
            "sync_period": 3600.0,
            "concurrency": 10,
            "leader_election": False,
            "leader_election_namespace": "crossplane-system",
            "metrics_address": "0.0.0.0",
            "metrics_port": 8080,
            "kubeconfig": None,
            "debug": False,
            "lease": "controlplane-provider",
        },
    ),
    GoodCase("--poll takes seconds as a Go duration.", ["--poll=30s"], {"poll_interval": 30.0}),
    GoodCase("--poll takes compound durations.", ["--poll", "1h30m"], {"poll_interval": 5400.0}),
    GoodCase("--poll takes fractions.", ["--poll", "1.5m"], {"poll_interval": 90.0}),
    GoodCase(
        "--poll-interval still takes bare seconds.",
        ["--poll-interval", "90"],
        {"poll_interval": 90},
    ),
    GoodCase(
        "--poll-interval takes durations too.", ["--poll-interval=2m"], {"poll_interval": 120.0}
    ),
    GoodCase(
        "--poll and --poll-interval may both be given when they agree.",
        ["--poll=1m", "--poll-interval=60"],
        {"poll_interval": 60.0},
    ),
    GoodCase("--sync sets the resync period.", ["--sync", "10m"], {"sync_period": 600.0}),
    GoodCase("-s is --sync, as in providers.", ["-s", "2h"], {"sync_period": 7200.0}),
    GoodCase(
        "--sync-interval is --sync, as in Crossplane core.",
        ["--sync-interval=45m"],
        {"sync_period": 2700.0},
    ),
    GoodCase(
        "--max-reconcile-rate sets the workers.", ["--max-reconcile-rate=5"], {"concurrency": 5}
    ),
    GoodCase("--concurrency stays an alias.", ["--concurrency", "3"], {"concurrency": 3}),
    GoodCase(
        "--leader-election turns on election.", ["--leader-election"], {"leader_election": True}
    ),
    GoodCase("-l is --leader-election.", ["-l"], {"leader_election": True}),
    GoodCase(
        "LEADER_ELECTION turns on election, as providers read it.",
        [],
        {"leader_election": True},
        env={"LEADER_ELECTION": "true"},
    ),
    GoodCase(
        "--no-leader-election wins over the variable.",
        ["--no-leader-election"],
        {"leader_election": False},
        env={"LEADER_ELECTION": "true"},
    ),
    GoodCase(
        "The Lease lives in the POD_NAMESPACE Crossplane's runtime sets.",
        [],
        {"leader_election_namespace": "crossplane-system-2"},
        env={"POD_NAMESPACE": "crossplane-system-2"},
    ),
    GoodCase(
        "--leader-election-namespace wins over POD_NAMESPACE.",
        ["--leader-election-namespace", "elsewhere"],
        {"leader_election_namespace": "elsewhere"},
        env={"POD_NAMESPACE": "crossplane-system"},
    ),
    GoodCase(
        "METRICS_BIND_ADDRESS of :port listens on every address, as providers do.",
        [],
        {"metrics_address": "0.0.0.0", "metrics_port": 9090},
        env={"METRICS_BIND_ADDRESS": ":9090"},
    ),
    GoodCase(
        "--metrics-bind-address takes host:port.",
        ["--metrics-bind-address", "127.0.0.1:18080"],
        {"metrics_address": "127.0.0.1", "metrics_port": 18080},
    ),
    GoodCase("-d is --debug.", ["-d"], {"debug": True}),
    GoodCase(
        "Every flag is read from CONTROLPLANE_PROVIDER_<FLAG> too (kingpin's DefaultEnvars).",
        [],
        {"poll_interval": 300.0, "sync_period": 1800.0, "concurrency": 4, "debug": True},
        env={
            "CONTROLPLANE_PROVIDER_POLL": "5m",
            "CONTROLPLANE_PROVIDER_SYNC": "30m",
            "CONTROLPLANE_PROVIDER_MAX_RECONCILE_RATE": "4",
            "CONTROLPLANE_PROVIDER_DEBUG": "true",
        },
    ),
    GoodCase(
        "A flag wins over its variable.",
        ["--poll", "2m"],
        {"poll_interval": 120.0},
        env={"CONTROLPLANE_PROVIDER_POLL": "5m"},
    ),
    GoodCase(
        "KUBECONFIG names the kubeconfig when --kubeconfig is not given.",
        [],
        {"kubeconfig": "/etc/kube/config"},
        env={"KUBECONFIG": "/etc/kube/config"},
    ),
    GoodCase(
        "The backup controller resyncs every hour and holds its own Lease by default.",
        [],
        {"sync_period": 3600.0, "concurrency": 10, "lease": "controlplane-backup-controller"},
        command=backup_main,
    ),
    GoodCase(
        "The backup controller takes the common flags.",
        ["-s", "15m", "--max-reconcile-rate", "2", "-l", "-d"],
        {"sync_period": 900.0, "concurrency": 2, "leader_election": True, "debug": True},
        command=backup_main,
    ),
    GoodCase(
        "The backup controller reads CONTROLPLANE_BACKUP_CONTROLLER_<FLAG>.",
        [],
        {"sync_period": 120.0, "leader_election": True},
        env={"CONTROLPLANE_BACKUP_CONTROLLER_SYNC": "2m", "LEADER_ELECTION": "1"},
        command=backup_main,
    ),
    GoodCase(
        "A deleted schedule waits 30 minutes for its final Backup by default.",
        [],
        {"final_backup_timeout": 1800.0},
        command=backup_main,
    ),
    GoodCase(
        "--final-backup-timeout takes a Go duration.",
        ["--final-backup-timeout=1h30m"],
        {"final_backup_timeout": 5400.0},
        command=backup_main,
    ),
    GoodCase(
        "--final-backup-timeout is read from its variable too.",
        [],
        {"final_backup_timeout": 600.0},
        env={"CONTROLPLANE_BACKUP_CONTROLLER_FINAL_BACKUP_TIMEOUT": "10m"},
        command=backup_main,
    ),
    GoodCase(
        "Restores of WebIdentity Backups use the backup controller's ServiceAccount by default.",
        [],
        {
            "web_identity_service_account": ServiceAccountRef(
                "controlplane-system", "controlplane-backup"
            )
        },
    ),
    GoodCase(
        "--web-identity-service-account names another NAMESPACE/NAME, dots in the name and all.",
        ["--web-identity-service-account=backups/writer.team-a"],
        {"web_identity_service_account": ServiceAccountRef("backups", "writer.team-a")},
    ),
    GoodCase(
        "An empty --web-identity-service-account keeps the provider's own projected token.",
        ["--web-identity-service-account="],
        {"web_identity_service_account": None},
    ),
    GoodCase(
        "--web-identity-service-account is read from its variable too.",
        [],
        {"web_identity_service_account": ServiceAccountRef("ops", "backup")},
        env={"CONTROLPLANE_PROVIDER_WEB_IDENTITY_SERVICE_ACCOUNT": "ops/backup"},
    ),
    GoodCase(
        "Two restores run at once by default, each for at most two hours.",
        [],
        {"restores": RestoreBounds()},
    ),
    GoodCase(
        "--max-restores and --restore-timeout bound the restore pool.",
        ["--max-restores=5", "--restore-timeout=30m"],
        {"restores": RestoreBounds(limit=5, deadline=1800.0)},
    ),
    GoodCase(
        "--max-restores and --restore-timeout are read from their variables too.",
        [],
        {"restores": RestoreBounds(limit=1, deadline=3600.0)},
        env={
            "CONTROLPLANE_PROVIDER_MAX_RESTORES": "1",
            "CONTROLPLANE_PROVIDER_RESTORE_TIMEOUT": "1h",
        },
    ),
    GoodCase(
        "The backup controller has its own token: it takes no ServiceAccount to borrow.",
        [],
        {"web_identity_service_account": None},
        command=backup_main,
    ),
    *(
        case
        for command in (main, backup_main)
        for case in (
            GoodCase(
                f"{command.name}: with no account listed, the IRSA role's account is allowed "
                "once it is known (off without one).",
                [],
                {"web_identity_roles": WebIdentityPolicy(irsa_default=True)},
                command=command,
            ),
            GoodCase(
                f"{command.name}: --web-identity-role-account=none turns WebIdentity off.",
                ["--web-identity-role-account=none"],
                {"web_identity_roles": WebIdentityPolicy()},
                command=command,
            ),
            GoodCase(
                f"{command.name}: the variable the deployment ships empty lists nothing.",
                [],
                {"web_identity_roles": WebIdentityPolicy(irsa_default=True)},
                env={f"{_prefix(command)}_WEB_IDENTITY_ROLE_ACCOUNT": ""},
                command=command,
            ),
            GoodCase(
                f"{command.name}: --web-identity-role-account repeats; the partition is aws.",
                [
                    "--web-identity-role-account=111122223333",
                    "--web-identity-role-account",
                    "444455556666",
                ],
                {
                    "web_identity_roles": WebIdentityPolicy(
                        frozenset({"111122223333", "444455556666"})
                    )
                },
                command=command,
            ),
            GoodCase(
                f"{command.name}: the web identity settings are read from their variables, "
                "accounts separated by spaces.",
                [],
                {
                    "web_identity_roles": WebIdentityPolicy(
                        frozenset({"111122223333", "444455556666"}),
                        "aws-us-gov",
                        frozenset({"arn:aws-us-gov:iam::111122223333:role/platform"}),
                    )
                },
                env={
                    f"{_prefix(command)}_WEB_IDENTITY_ROLE_ACCOUNT": "111122223333 444455556666",
                    f"{_prefix(command)}_WEB_IDENTITY_PARTITION": "aws-us-gov",
                    f"{_prefix(command)}_WEB_IDENTITY_DENIED_ROLE": (
                        "arn:aws-us-gov:iam::111122223333:role/Platform"
                    ),
                },
                command=command,
            ),
        )
    ),
    GoodCase(
        "With no --allowed-controlplane-host the provider allows only the Space's host.",
        [],
        {"controlplane_hosts": ControlPlaneHosts()},
    ),
    GoodCase(
        "--allowed-controlplane-host is repeatable, with wildcards and ports.",
        [
            "--allowed-controlplane-host=spaces.example.com",
            "--allowed-controlplane-host",
            "*.x.io:443",
        ],
        {
            "controlplane_hosts": ControlPlaneHosts(
                (HostPattern("spaces.example.com"), HostPattern("*.x.io", 443))
            )
        },
    ),
    GoodCase(
        "The provider reads --allowed-controlplane-host from its variable, space separated.",
        [],
        {
            "controlplane_hosts": ControlPlaneHosts(
                (HostPattern("a.example.com"), HostPattern("10.0.0.1", 6443))
            )
        },
        env={"CONTROLPLANE_PROVIDER_ALLOWED_CONTROLPLANE_HOST": "a.example.com 10.0.0.1:6443"},
    ),
    GoodCase(
        "The backup controller takes --allowed-controlplane-host from its own variable.",
        [],
        {"controlplane_hosts": ControlPlaneHosts((HostPattern("*.example.com"),))},
        env={"CONTROLPLANE_BACKUP_CONTROLLER_ALLOWED_CONTROLPLANE_HOST": "*.example.com"},
        command=backup_main,
    ),
    GoodCase(
        "A Backup may run for thirty minutes by default.",
        [],
        {"backup_timeout": 1800.0},
        command=backup_main,
    ),
    GoodCase(
        "--backup-timeout sets a Backup's deadline, from its variable too.",
        [],
        {"backup_timeout": 300.0},
        env={"CONTROLPLANE_BACKUP_CONTROLLER_BACKUP_TIMEOUT": "5m"},
        command=backup_main,
    ),
]


@pytest.mark.parametrize("case", GOOD_CASES, ids=lambda case: case.reason)
def test_flags_and_variables_set_the_options(
    case: GoodCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = parse(case.command, case.args, case.env, monkeypatch)
    got = {name: getattr(options, name) for name in case.want}
    assert got == case.want, case.reason


@dataclass
class BadCase:
    reason: str
    args: list[str]
    want_in_message: list[str]
    env: dict[str, str] = field(default_factory=dict)
    command: click.Command = main


BAD_CASES = [
    BadCase(
        "A bare number is no Go duration.",
        ["--poll", "10"],
        ["'--poll'", "missing unit", "e.g. --poll="],
    ),
    BadCase(
        "An unknown unit is refused.",
        ["--poll=1d"],
        ["'--poll'", "invalid duration", "e.g. --poll="],
    ),
    BadCase(
        "A poll under a second is refused.",
        ["--poll", "500ms"],
        ["'--poll'", "shorter than 1s", "e.g."],
    ),
    BadCase("A negative poll is refused.", ["--poll=-1m"], ["'--poll'", "shorter than 1s"]),
    BadCase(
        "--poll-interval refuses words.",
        ["--poll-interval", "often"],
        ["'--poll-interval'", "e.g. --poll-interval="],
    ),
    BadCase(
        "--poll-interval refuses an infinite number of seconds.",
        ["--poll-interval", "inf"],
        ["'--poll-interval'", "e.g. --poll-interval="],
    ),
    BadCase(
        "--poll-interval refuses zero seconds.",
        ["--poll-interval=0"],
        ["'--poll-interval'", "shorter than 1s"],
    ),
    BadCase(
        "--poll and --poll-interval that disagree are refused.",
        ["--poll=1m", "--poll-interval=2m"],
        ["--poll and --poll-interval", "e.g. --poll="],
    ),
    BadCase("--sync refuses words.", ["--sync", "forever"], ["'--sync'", "e.g. --sync="]),
    BadCase(
        "--max-restores refuses zero: no restore would ever run.",
        ["--max-restores=0"],
        ["'--max-restores'", "0 is not in the range x>=1"],
    ),
    BadCase(
        "--restore-timeout refuses a bare number.",
        ["--restore-timeout=600"],
        ["'--restore-timeout'", "missing unit", "e.g. --restore-timeout="],
    ),
    BadCase(
        "--final-backup-timeout refuses a bare number.",
        ["--final-backup-timeout", "30"],
        ["'--final-backup-timeout'", "missing unit", "e.g. --final-backup-timeout="],
        command=backup_main,
    ),
    BadCase(
        "The provider has no --final-backup-timeout: it takes no final backups.",
        ["--final-backup-timeout=1m"],
        ["--final-backup-timeout"],
    ),
    BadCase("--sync refuses zero.", ["-s", "0s"], ["'--sync'", "shorter than 1s"]),
    BadCase(
        "--max-reconcile-rate refuses zero.",
        ["--max-reconcile-rate=0"],
        ["'--max-reconcile-rate'", "e.g. --max-reconcile-rate="],
    ),
    BadCase(
        "--max-reconcile-rate refuses words.",
        ["--concurrency", "many"],
        ["'--max-reconcile-rate'", "e.g. --max-reconcile-rate="],
    ),
    BadCase(
        "--metrics-bind-address needs a port.",
        ["--metrics-bind-address", "localhost"],
        ["'--metrics-bind-address'", "e.g. --metrics-bind-address="],
    ),
    BadCase(
        "--metrics-bind-address refuses a port out of range.",
        ["--metrics-bind-address=:70000"],
        ["'--metrics-bind-address'", "e.g."],
    ),
    BadCase(
        "A bad variable names the flag it sets.",
        [],
        ["'--poll'", "e.g. --poll="],
        env={"CONTROLPLANE_PROVIDER_POLL": "soon"},
    ),
    BadCase(
        "A bad LEADER_ELECTION names the flag and the values it takes.",
        [],
        ["'--leader-election'", "LEADER_ELECTION", "true"],
        env={"LEADER_ELECTION": "maybe"},
    ),
    BadCase(
        "A bad METRICS_BIND_ADDRESS names the flag and the variable.",
        [],
        ["'--metrics-bind-address'", "METRICS_BIND_ADDRESS", "e.g."],
        env={"METRICS_BIND_ADDRESS": "8080"},
    ),
    BadCase(
        "--web-identity-service-account needs a namespace and a name.",
        ["--web-identity-service-account=controlplane-backup"],
        [
            "'--web-identity-service-account'",
            "is not NAMESPACE/NAME",
            "e.g. --web-identity-service-account=controlplane-system/controlplane-backup",
        ],
    ),
    BadCase(
        "--web-identity-service-account refuses names Kubernetes refuses.",
        ["--web-identity-service-account", "Team_A/backup"],
        ["'--web-identity-service-account'", "a DNS-1123 label, a slash, then a DNS-1123 name"],
    ),
    BadCase(
        "--web-identity-service-account refuses a path deeper than NAMESPACE/NAME.",
        ["--web-identity-service-account=a/b/c"],
        ["'--web-identity-service-account'", "is not NAMESPACE/NAME"],
    ),
    BadCase(
        "A bad web identity variable names the flag it sets.",
        [],
        ["'--web-identity-service-account'", "is not NAMESPACE/NAME"],
        env={"CONTROLPLANE_PROVIDER_WEB_IDENTITY_SERVICE_ACCOUNT": "nobody"},
    ),
    *(
        case
        for command in (main, backup_main)
        for case in (
            BadCase(
                f"{command.name}: --web-identity-role-account takes an account id, not a role.",
                ["--web-identity-role-account=arn:aws:iam::111122223333:role/x"],
                [
                    "--web-identity-role-account:",
                    "is not an AWS account id (12 digits)",
                    "e.g. --web-identity-role-account=111122223333",
                ],
                command=command,
            ),
            BadCase(
                f"{command.name}: a bad account in the variable names the flag it sets.",
                [],
                ["--web-identity-role-account:", "'1234' is not an AWS account id"],
                env={f"{_prefix(command)}_WEB_IDENTITY_ROLE_ACCOUNT": "111122223333 1234"},
                command=command,
            ),
            BadCase(
                f"{command.name}: --web-identity-partition is an AWS partition.",
                ["--web-identity-partition=gcp"],
                ["--web-identity-partition:", "is not an AWS partition"],
                command=command,
            ),
            BadCase(
                f"{command.name}: --web-identity-denied-role is a role's ARN.",
                ["--web-identity-denied-role=controlplane-backup-controller"],
                ["--web-identity-denied-role:", "is not an IAM role's ARN", "e.g."],
                command=command,
            ),
        )
    ),
    BadCase(
        "--allowed-controlplane-host takes a host, not a URL.",
        ["--allowed-controlplane-host=https://spaces.example.com"],
        [
            "--allowed-controlplane-host",
            "is not a host pattern",
            "e.g. --allowed-controlplane-host=",
        ],
    ),
    BadCase(
        "--allowed-controlplane-host allows a wildcard only as the first label.",
        ["--allowed-controlplane-host", "spaces.*.example.com"],
        ["--allowed-controlplane-host", "is not a host pattern"],
    ),
    BadCase(
        "A bad allowed host in the backup controller's variable names the flag.",
        [],
        ["--allowed-controlplane-host", "is not a host pattern"],
        env={"CONTROLPLANE_BACKUP_CONTROLLER_ALLOWED_CONTROLPLANE_HOST": "host:port"},
        command=backup_main,
    ),
    BadCase(
        "--backup-timeout refuses a bare number.",
        ["--backup-timeout=30"],
        ["'--backup-timeout'", "missing unit", "e.g. --backup-timeout="],
        command=backup_main,
    ),
    BadCase(
        "The provider takes no Backups, so --backup-timeout is unknown to it.",
        ["--backup-timeout=1m"],
        ["No such option", "--backup-timeout"],
    ),
    BadCase(
        "The backup controller refuses a bad --sync the same way.",
        ["--sync=1"],
        ["'--sync'", "missing unit", "e.g. --sync="],
        command=backup_main,
    ),
    BadCase(
        "The backup controller has nothing to poll, so --poll is unknown to it.",
        ["--poll=1m"],
        ["No such option", "--poll"],
        command=backup_main,
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_a_bad_value_is_a_usage_error_naming_the_flag_with_an_example(case: BadCase) -> None:
    result = CliRunner().invoke(case.command, case.args, env=case.env)
    assert result.exit_code == 2, (case.reason, result.output)
    assert "Traceback" not in result.output
    for text in case.want_in_message:
        assert text in result.output, (case.reason, text, result.output)


def test_the_help_names_every_crossplane_flag_and_variable() -> None:
    text = CliRunner().invoke(main, ["--help"]).output
    for name in (
        "--poll",
        "--poll-interval",
        "--sync",
        "--max-reconcile-rate",
        "--leader-election",
        "--debug",
        "LEADER_ELECTION",
        "POD_NAMESPACE",
        "METRICS_BIND_ADDRESS",
        "CONTROLPLANE_PROVIDER_POLL",
        "--web-identity-service-account",
        "--allowed-controlplane-host",
    ):
        assert name in text, name


@dataclass
class ShippedCase:
    reason: str
    path: str
    command: click.Command
    want: dict[str, object]


SHIPPED_CASES = [
    ShippedCase(
        "The provider's DeploymentRuntimeConfig elects a leader and polls every minute.",
        "deploy/provider/runtimeconfig.yaml",
        main,
        {"leader_election": True, "poll_interval": 60.0},
    ),
    ShippedCase(
        "The backup controller's Deployment elects a leader in its own namespace.",
        "deploy/backup-controller/deployment.yaml",
        backup_main,
        {"leader_election": True, "leader_election_namespace": "controlplane-backup"},
    ),
]


def containers(node: Any) -> list[dict[str, Any]]:
    """Every container in a manifest, wherever its pod template sits."""
    if isinstance(node, dict):
        found = [c for c in node.get("containers", []) if isinstance(c, dict)]
        return found + [c for key, v in node.items() if key != "containers" for c in containers(v)]
    if isinstance(node, list):
        return [c for item in node for c in containers(item)]
    return []


@pytest.mark.parametrize("case", SHIPPED_CASES, ids=lambda case: case.reason)
def test_the_shipped_manifests_arguments_parse(
    case: ShippedCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = yaml.safe_load_all((ROOT / case.path).read_text())
    (container,) = [c for doc in docs for c in containers(doc) if "args" in c]
    # The namespace Kubernetes gives through the downward API.
    env = {"POD_NAMESPACE": "controlplane-backup"}
    options = parse(case.command, list(container["args"]), env, monkeypatch)
    assert {name: getattr(options, name) for name in case.want} == case.want, case.reason
