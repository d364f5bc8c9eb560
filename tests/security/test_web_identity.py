"""Which roles a team's WebIdentity Backup may name (issue 18): the pure rules.

A WebIdentity Backup has the backup controller pass its projected token, and a
restore a token the provider mints for that controller, straight into
``storage.roleArn``: every role trusting that subject would open. Only the
operator's accounts, partition and the namespace's own team roles may.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from function.names import AwsNames
from provider.backup.storage.tenancy import TenancyError
from provider.backup.storage.web_identity import (
    WebIdentityPolicy,
    account_setting,
    parse_accounts,
    parse_denied,
    parse_partition,
    pod_irsa_role,
    team_role_name,
)

ACCOUNT = "111122223333"
FOREIGN = "444455556666"
CONTROLLER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/controlplane-backup-controller"
ENABLED = WebIdentityPolicy(frozenset({ACCOUNT}))
# The role the function names for team-a/myctp, and that of team/a-myctp, whose
# name begins the same without the hash.
TEAM_A_ROLE = AwsNames.of("b", "team-a", "myctp").role
TEAM_ROLE = AwsNames.of("b", "team", "a-myctp").role


@dataclass(frozen=True)
class RoleCase:
    reason: str
    role_arn: str
    # Empty: allowed; else the rule named in the refusal.
    refused: str = ""
    policy: WebIdentityPolicy = ENABLED
    namespace: str = "team-a"
    prefix: str = "team-a/myctp/"


ROLES = [
    RoleCase(
        "the namespace's team role in an account the operator lists is allowed",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
    ),
    RoleCase(
        "a team role under an IAM path is the same role by its name",
        f"arn:aws:iam::{ACCOUNT}:role/teams/{TEAM_A_ROLE}",
    ),
    RoleCase(
        "nothing is allowed by default: the operator lists no account, so no token is minted",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="assumeRoleWith WebIdentity is off: the operator allows no AWS account's roles "
        "(--web-identity-role-account)",
        policy=WebIdentityPolicy(),
    ),
    RoleCase(
        "a role in an account the operator does not list is refused, however it is named",
        f"arn:aws:iam::{FOREIGN}:role/{TEAM_A_ROLE}",
        refused=f"is in AWS account {FOREIGN}, which the operator does not allow "
        "(--web-identity-role-account)",
    ),
    RoleCase(
        "a role in another partition is refused",
        f"arn:aws-cn:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="is in partition aws-cn, not aws, the operator's (--web-identity-partition)",
    ),
    RoleCase(
        "the operator's partition is the one allowed",
        f"arn:aws-us-gov:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        policy=WebIdentityPolicy(frozenset({ACCOUNT}), "aws-us-gov"),
    ),
    RoleCase(
        "the backup controller's own role is refused: it trusts the same subject",
        CONTROLLER_ROLE,
        refused="must name the backup role of control plane myctp in namespace team-a",
    ),
    RoleCase(
        "the controller's own role is refused by name, even to a namespace its name starts with",
        CONTROLLER_ROLE,
        refused="is a role the operator denies to teams (--web-identity-denied-role)",
        policy=WebIdentityPolicy(frozenset({ACCOUNT}), denied=frozenset({CONTROLLER_ROLE})),
        namespace="controlplane",
        prefix="controlplane/backup-controller/",
    ),
    RoleCase(
        "a denied role is refused whatever the case of its name (IAM names are case-insensitive)",
        CONTROLLER_ROLE.replace("controlplane-backup", "ControlPlane-Backup"),
        refused="is a role the operator denies to teams (--web-identity-denied-role)",
        policy=WebIdentityPolicy(frozenset({ACCOUNT}), denied=frozenset({CONTROLLER_ROLE})),
        namespace="controlplane",
        prefix="controlplane/backup-controller/",
    ),
    RoleCase(
        "another namespace's team role is refused",
        f"arn:aws:iam::{ACCOUNT}:role/{AwsNames.of('b', 'team-b', 'myctp').role}",
        refused="must name the backup role of control plane myctp in namespace team-a",
    ),
    RoleCase(
        "namespace team may not name team-a's role, whose name begins with team-",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="must name the backup role of control plane a-myctp in namespace team",
        namespace="team",
        prefix="team/a-myctp/",
    ),
    RoleCase(
        "namespace team names its own a-myctp's role, exactly",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_ROLE}",
        namespace="team",
        prefix="team/a-myctp/",
    ),
    RoleCase(
        "another composite's role of the same namespace is refused: the prefix names the role",
        f"arn:aws:iam::{ACCOUNT}:role/{AwsNames.of('b', 'team-a', 'other').role}",
        refused="must name the backup role of control plane myctp in namespace team-a",
    ),
    RoleCase(
        "a role named before the hash is ambiguous between namespaces and refused",
        f"arn:aws:iam::{ACCOUNT}:role/team-a-myctp-backup",
        refused="must name the backup role of control plane myctp",
    ),
    RoleCase(
        "a prefix of another namespace names no role",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="WebIdentity needs spec.storage.prefix to be <namespace>/<name>/",
        prefix="team-b/myctp/",
    ),
    RoleCase(
        "a prefix deeper than one name names no role",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="WebIdentity needs spec.storage.prefix",
        prefix="team-a/myctp/deeper/",
    ),
    RoleCase(
        "a user is not a role",
        f"arn:aws:iam::{ACCOUNT}:user/team-a-myctp-backup",
        refused="must be an IAM role's ARN, arn:aws:iam::<account>:role/<name>",
    ),
    RoleCase(
        "an empty role is not a role",
        "",
        refused="must be an IAM role's ARN",
    ),
    RoleCase(
        "an account id that is not 12 digits is not an ARN",
        "arn:aws:iam::1111:role/{TEAM_A_ROLE}",
        refused="must be an IAM role's ARN",
    ),
]


@pytest.mark.parametrize("case", ROLES, ids=lambda c: c.reason)
def test_a_web_identity_backup_may_name_only_the_operators_accounts_team_roles(
    case: RoleCase,
) -> None:
    if not case.refused:
        case.policy.check_role(case.role_arn, case.namespace, case.prefix)
        return
    with pytest.raises(TenancyError) as refused:
        case.policy.check_role(case.role_arn, case.namespace, case.prefix)
    assert str(refused.value).startswith("spec.storage.roleArn")
    assert case.refused in str(refused.value)


@dataclass(frozen=True)
class NamingCase:
    reason: str
    namespace: str
    composite: str


NAMINGS = [
    NamingCase("a short name is kept whole", "team-a", "myctp"),
    NamingCase("a long composite's name is shortened after the namespace", "team-a", "c" * 60),
    NamingCase("a namespace of 47 characters keeps its dash", "n" * 47, "myctp"),
    NamingCase("a namespace of 48 characters is cut at its end", "n" * 48, "myctp"),
    NamingCase("a namespace of 54 characters is cut inside", "n" * 54, "myctp"),
    NamingCase("a namespace of 63 characters is cut inside", "n" * 63, "myctp"),
    NamingCase("a namespace cut at a dash", "n" * 47 + "-x", "myctp"),
    NamingCase("a namespace cut right after a dash", "n" * 46 + "-x", "myctp"),
]


@pytest.mark.parametrize("case", NAMINGS, ids=lambda c: c.reason)
def test_the_team_roles_the_function_names_are_the_namespaces_and_no_other(
    case: NamingCase,
) -> None:
    # The provider computes the name without importing the function: the two agree.
    names = AwsNames.of("bucket-prefix", case.namespace, case.composite)
    assert team_role_name(case.namespace, case.composite) == names.role
    arn = f"arn:aws:iam::{ACCOUNT}:role/{names.role}"
    ENABLED.check_role(arn, case.namespace, f"{case.namespace}/{case.composite}/")
    with pytest.raises(TenancyError, match="must name the backup role"):
        ENABLED.check_role(arn, "other", f"other/{case.composite}/")


@dataclass(frozen=True)
class SettingCase:
    reason: str
    parse: object
    value: object
    # Empty: parsed; else part of the error.
    error: str = ""


SETTINGS = [
    SettingCase("accounts may be repeated or space separated", parse_accounts, [ACCOUNT, FOREIGN]),
    SettingCase("an account of 11 digits is refused", parse_accounts, ["11112222333"], "12 digits"),
    SettingCase("an account ARN is not an account id", parse_accounts, [CONTROLLER_ROLE], "12"),
    SettingCase("aws-us-gov is a partition", parse_partition, "aws-us-gov"),
    SettingCase("a partition is aws or aws-...", parse_partition, "azure", "not an AWS partition"),
    SettingCase("a denied role is a role's ARN", parse_denied, [CONTROLLER_ROLE]),
    SettingCase("a denied role's name alone is refused", parse_denied, ["x"], "IAM role's ARN"),
]


@pytest.mark.parametrize("case", SETTINGS, ids=lambda c: c.reason)
def test_the_operators_settings_are_checked_with_the_rule_named(case: SettingCase) -> None:
    parse = case.parse
    assert callable(parse)
    if not case.error:
        parse(case.value)
        return
    with pytest.raises(ValueError, match=case.error):
        parse(case.value)


def test_accounts_in_one_setting_are_split_on_spaces_and_commas() -> None:
    assert parse_accounts([f"{ACCOUNT} {FOREIGN},999988887777"]) == {
        ACCOUNT,
        FOREIGN,
        "999988887777",
    }


def test_denied_roles_are_kept_in_lower_case() -> None:
    mixed = CONTROLLER_ROLE.replace("controlplane-backup", "ControlPlane-Backup")
    assert parse_denied([mixed]) == {CONTROLLER_ROLE}


IRSA_ROLE = CONTROLLER_ROLE
SOURCE = "the test's IRSA role"
# What the flags give when the operator lists no account: the IRSA role's, once known.
BY_DEFAULT = WebIdentityPolicy(irsa_default=True)


@dataclass(frozen=True)
class IrsaCase:
    reason: str
    policy: WebIdentityPolicy
    irsa_role: str
    role_arn: str
    # Empty: allowed; else the rule named in the refusal.
    refused: str = ""
    namespace: str = "team-a"
    prefix: str = "team-a/myctp/"


IRSA_CASES = [
    IrsaCase(
        "as shipped, the IRSA role's account is the one allowed: the team's role there opens",
        BY_DEFAULT,
        IRSA_ROLE,
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
    ),
    IrsaCase(
        "as shipped, a role of any other account is refused, naming the setting",
        BY_DEFAULT,
        IRSA_ROLE,
        f"arn:aws:iam::{FOREIGN}:role/{TEAM_A_ROLE}",
        refused=f"is in AWS account {FOREIGN}, which the operator does not allow "
        "(--web-identity-role-account)",
    ),
    IrsaCase(
        "the IRSA role itself trusts the same subject, and is never a team's: refused",
        BY_DEFAULT,
        IRSA_ROLE,
        IRSA_ROLE,
        refused="or the web identity's own IRSA role",
        namespace="controlplane",
        prefix="controlplane/backup-controller/",
    ),
    IrsaCase(
        "another namespace's role in the IRSA role's account is still refused",
        BY_DEFAULT,
        IRSA_ROLE,
        f"arn:aws:iam::{ACCOUNT}:role/{AwsNames.of('b', 'team-b', 'myctp').role}",
        refused="must name the backup role of control plane myctp in namespace team-a",
    ),
    IrsaCase(
        "without an IRSA role and with no account listed it is off, saying what to set",
        BY_DEFAULT,
        "",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="assumeRoleWith WebIdentity is off: the operator lists no AWS account "
        "(--web-identity-role-account) and the web identity has no IRSA role, whose account "
        f"would be the default ({SOURCE})",
    ),
    IrsaCase(
        "listed accounts are the operator's word: the IRSA role's account is not added",
        WebIdentityPolicy(frozenset({FOREIGN})),
        IRSA_ROLE,
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused=f"is in AWS account {ACCOUNT}, which the operator does not allow",
    ),
    IrsaCase(
        "with listed accounts the IRSA role is denied all the same",
        WebIdentityPolicy(frozenset({ACCOUNT})),
        IRSA_ROLE,
        IRSA_ROLE,
        refused="or the web identity's own IRSA role",
        namespace="controlplane",
        prefix="controlplane/backup-controller/",
    ),
    IrsaCase(
        "'none' keeps it off whatever the pod has",
        WebIdentityPolicy(),
        IRSA_ROLE,
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="the operator allows no AWS account's roles (--web-identity-role-account)",
    ),
    IrsaCase(
        "the IRSA role's partition comes with its account",
        BY_DEFAULT,
        f"arn:aws-cn:iam::{ACCOUNT}:role/controlplane-backup-controller",
        f"arn:aws-cn:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
    ),
    IrsaCase(
        "so a role of the same account in another partition is refused",
        BY_DEFAULT,
        f"arn:aws-cn:iam::{ACCOUNT}:role/controlplane-backup-controller",
        f"arn:aws:iam::{ACCOUNT}:role/{TEAM_A_ROLE}",
        refused="is in partition aws, not aws-cn",
    ),
]


@pytest.mark.parametrize("case", IRSA_CASES, ids=lambda c: c.reason)
def test_by_default_web_identity_follows_the_operators_irsa_role(case: IrsaCase) -> None:
    policy = case.policy.resolved(case.irsa_role, SOURCE)
    if not case.refused:
        policy.check_role(case.role_arn, case.namespace, case.prefix)
        return
    with pytest.raises(TenancyError) as refused:
        policy.check_role(case.role_arn, case.namespace, case.prefix)
    assert case.refused in str(refused.value)


@dataclass(frozen=True)
class PodCase:
    reason: str
    environ: dict[str, str]
    want: str


POD_CASES = [
    PodCase(
        "EKS's webhook sets both the role and the token file: that is the pod's IRSA role",
        {"AWS_ROLE_ARN": IRSA_ROLE, "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"},
        IRSA_ROLE,
    ),
    PodCase("a role without a projected token is no IRSA", {"AWS_ROLE_ARN": IRSA_ROLE}, ""),
    PodCase("nothing set: no IRSA", {}, ""),
]


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.reason)
def test_the_pods_irsa_role_is_what_eks_sets(case: PodCase) -> None:
    assert pod_irsa_role(case.environ) == case.want


@dataclass(frozen=True)
class AccountSettingCase:
    reason: str
    values: list[str]
    want: tuple[frozenset[str], bool] | None
    error: str = ""


ACCOUNT_SETTINGS = [
    AccountSettingCase("nothing listed: the IRSA role's account", [], (frozenset(), True)),
    AccountSettingCase("an empty variable lists nothing", [""], (frozenset(), True)),
    AccountSettingCase("listed accounts, and no default", [ACCOUNT], (frozenset({ACCOUNT}), False)),
    AccountSettingCase("'none' turns it off", ["none"], (frozenset(), False)),
    AccountSettingCase(
        "'none' with an account is a contradiction", [f"none {ACCOUNT}"], None, "cannot be listed"
    ),
]


@pytest.mark.parametrize("case", ACCOUNT_SETTINGS, ids=lambda c: c.reason)
def test_the_account_setting_says_whether_the_irsa_role_is_the_default(
    case: AccountSettingCase,
) -> None:
    if case.want is not None:
        assert account_setting(case.values) == case.want
        return
    with pytest.raises(ValueError, match=case.error):
        account_setting(case.values)


def test_the_policy_in_force_is_described_for_the_log_without_a_token() -> None:
    on = BY_DEFAULT.resolved(IRSA_ROLE, SOURCE).describe()
    assert on == (
        f"WebIdentity Backups may name roles of account(s) {ACCOUNT} in partition aws; "
        f"denied roles: {IRSA_ROLE}"
    )
    assert BY_DEFAULT.resolved("", SOURCE).describe().startswith("WebIdentity is off: ")
