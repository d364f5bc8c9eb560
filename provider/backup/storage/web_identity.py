"""Which roles a team's ``WebIdentity`` Backup may have the controllers assume.

With ``assumeRoleWith: WebIdentity`` (irsa trust) the backup controller passes
its own projected token, and a restore a token the provider mints for that
controller's ServiceAccount, to ``sts:AssumeRoleWithWebIdentity`` straight into
``storage.roleArn``, which a team writes. STS lets the call into every role
that trusts that one subject, the team roles and whatever else does: the
controller's own IRSA role, a platform role, a role in another account trusting
this cluster's OIDC provider. So the operator says which roles a Backup may
name, and everything else is refused before a token is read or minted:

- only roles of the AWS accounts the operator lists
  (``--web-identity-role-account``); listing none, the account of the web
  identity's own IRSA role (``resolved``): the role EKS gives the backup
  controller's ServiceAccount (its ``eks.amazonaws.com/role-arn`` annotation,
  which the pod identity webhook passes to the pod as ``AWS_ROLE_ARN`` with
  ``AWS_WEB_IDENTITY_TOKEN_FILE``). That role is the operator's, in the
  operator's account, set where no team can write (the controller's namespace),
  so on the install the README describes (EKS with IRSA, trust mode ``irsa``)
  WebIdentity works as shipped and reaches only the operator's account. Without
  an IRSA role and a listed account it is off, and ``--web-identity-role-account
  none`` turns it off whatever the pod has;
- only ``arn:<partition>:iam::<allowed account>:role/...``, in the IRSA
  role's partition or, for listed accounts, ``--web-identity-partition``
  (``aws`` by default);
- never the web identity's own IRSA role (it trusts the very subject the team
  roles trust), nor a role the operator denies (``--web-identity-denied-role``:
  a platform role);
- only the role the function names for the Backup's own control plane:
  ``<namespace>-<composite>-<hash of namespace/composite>-backup``, exactly,
  with the composite taken from ``storage.prefix`` (``<namespace>/<composite>/``,
  which the prefix rule holds to the Backup's namespace). A name prefix would
  not do: namespace ``team`` could name ``team-a-...`` roles. So a Backup in
  ``team`` cannot name ``team-a``'s role, nor a role of the platform's.

Pure: no AWS, no Kubernetes (the caller reads the IRSA role: the pod's
environment, or the annotation of the ServiceAccount whose token it mints).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from provider.backup.storage.tenancy import TenancyError

DEFAULT_PARTITION = "aws"
# What --web-identity-role-account takes to turn WebIdentity off whatever the pod has.
NONE = "none"
# The ServiceAccount annotation that gives its pods an IAM role (IRSA), and the
# variables EKS's pod identity webhook then sets in them.
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
ROLE_ARN_VARIABLE = "AWS_ROLE_ARN"
TOKEN_FILE_VARIABLE = "AWS_WEB_IDENTITY_TOKEN_FILE"  # noqa: S105 (a variable's name)
POD_IRSA_SOURCE = (
    f"{ROLE_ARN_VARIABLE} with {TOKEN_FILE_VARIABLE}, which EKS sets from the "
    f"ServiceAccount's {IRSA_ANNOTATION} annotation"
)
ACCOUNT = re.compile(r"[0-9]{12}")
PARTITION = re.compile(r"aws(?:-[a-z]+)*")
# An IAM role's ARN: its path (none, or segments ending in "/") and its name.
ROLE_ARN = re.compile(
    r"arn:(?P<partition>[a-z-]+):iam::(?P<account>[0-9]{12}):role/"
    r"(?P<path>(?:[\w+=,.@-]+/)*)(?P<name>[\w+=,.@-]{1,64})"
)
# The function names a team role ``<namespace>-<composite>-<hash>-backup``, the
# head ``<namespace>-<composite>`` cut to 48 characters so the name fits IAM's
# 64, the hash the first 8 hex digits of sha256("<namespace>/<composite>")
# (function/names.py, which the provider may not import; a test holds the two
# together). Roles named before the hash (``<namespace>-<composite>-backup``)
# are ambiguous between namespaces, so they are never allowed here.
TEAM_ROLE_HEAD = 48
_TEAM_ROLE_SUFFIX = "-backup"
_HASH_LENGTH = 8


def team_role_name(namespace: str, composite: str) -> str:
    """The name the function gives the backup role of ``composite`` in ``namespace``."""
    digest = hashlib.sha256(f"{namespace}/{composite}".encode()).hexdigest()[:_HASH_LENGTH]
    head = f"{namespace}-{composite}"[:TEAM_ROLE_HEAD].rstrip("-.")
    return f"{head}-{digest}{_TEAM_ROLE_SUFFIX}"


class WebIdentityRefusedError(TenancyError):
    """A role a ``WebIdentity`` Backup may not name; the message names the field and the rule."""


@dataclass(frozen=True)
class WebIdentityPolicy:
    """The roles the operator lets a team's ``WebIdentity`` Backup be assumed into.

    Attributes:
        accounts: The AWS accounts whose roles may be named; none: WebIdentity is off.
        partition: The partition of those accounts (``aws``, ``aws-cn``, ``aws-us-gov``...).
        denied: Role ARNs never assumed for a team, in lower case (IAM role names are
            case-insensitive).
        irsa_default: With no account listed, ``resolved`` allows the account of the
            web identity's own IRSA role.
        irsa_source: Where that role was read (for messages); empty before ``resolved``.
    """

    accounts: frozenset[str] = field(default_factory=frozenset)
    partition: str = DEFAULT_PARTITION
    denied: frozenset[str] = field(default_factory=frozenset)
    irsa_default: bool = False
    irsa_source: str = ""

    def resolved(self, irsa_role: str, source: str) -> WebIdentityPolicy:
        """The policy in force when the web identity's own IRSA role is ``irsa_role``.

        That role trusts the very subject the team roles trust, and is never a
        team's: it is denied. With ``irsa_default`` and no account listed, its
        account, in its partition, is the one allowed. ``irsa_role`` empty (or not
        a role's ARN): nothing is added. ``source`` says where it was read.
        """
        found = ROLE_ARN.fullmatch(irsa_role)
        if found is None:
            return replace(self, irsa_source=source)
        denied = self.denied | {irsa_role.lower()}
        if self.accounts or not self.irsa_default:
            return replace(self, denied=denied, irsa_source=source)
        return replace(
            self,
            accounts=frozenset({found["account"]}),
            partition=found["partition"],
            denied=denied,
            irsa_source=source,
        )

    def describe(self) -> str:
        """The policy in a line for the log (role ARNs and account ids: no secret)."""
        if not self.accounts:
            return "WebIdentity is off: " + self._off()
        accounts = ", ".join(sorted(self.accounts))
        denied = ", ".join(sorted(self.denied)) or "none"
        return (
            f"WebIdentity Backups may name roles of account(s) {accounts} in partition "
            f"{self.partition}; denied roles: {denied}"
        )

    def _off(self) -> str:
        if not self.irsa_default:
            return "the operator allows no AWS account's roles (--web-identity-role-account)"
        where = self.irsa_source or POD_IRSA_SOURCE
        return (
            "the operator lists no AWS account (--web-identity-role-account) and the web "
            f"identity has no IRSA role, whose account would be the default ({where})"
        )

    def check_role(
        self, role_arn: str, namespace: str, prefix: str, where: str = "spec.storage.roleArn"
    ) -> None:
        """Refuse a role a ``WebIdentity`` Backup in ``namespace`` may not be assumed into.

        ``prefix`` is the Backup's ``storage.prefix``, ``<namespace>/<composite>/``:
        the role must be that composite's, exactly.

        Raises:
            WebIdentityRefusedError: naming the field and the rule the role breaks.
        """
        if not self.accounts:
            msg = f"{where}: assumeRoleWith WebIdentity is off: {self._off()}"
            raise WebIdentityRefusedError(msg)
        found = ROLE_ARN.fullmatch(role_arn)
        if found is None:
            arn = f"arn:{self.partition}:iam::<account>:role/<name>"
            msg = f"{where} must be an IAM role's ARN, {arn}"
            raise WebIdentityRefusedError(msg)
        if found["partition"] != self.partition:
            msg = (
                f"{where} is in partition {found['partition']}, not {self.partition}, "
                "the operator's (--web-identity-partition)"
            )
            raise WebIdentityRefusedError(msg)
        if found["account"] not in self.accounts:
            msg = (
                f"{where} is in AWS account {found['account']}, which the operator does not "
                "allow (--web-identity-role-account)"
            )
            raise WebIdentityRefusedError(msg)
        if role_arn.lower() in self.denied:
            msg = (
                f"{where} is a role the operator denies to teams (--web-identity-denied-role), "
                "or the web identity's own IRSA role"
            )
            raise WebIdentityRefusedError(msg)
        owner, _, rest = prefix.partition("/")
        composite = rest.removesuffix("/")
        if owner != namespace or not composite or "/" in composite or not rest.endswith("/"):
            msg = (
                f"{where}: WebIdentity needs spec.storage.prefix to be <namespace>/<name>/ "
                "of the Backup's own namespace, which names the role"
            )
            raise WebIdentityRefusedError(msg)
        wanted = team_role_name(namespace, composite)
        if found["name"].lower() != wanted:
            msg = (
                f"{where} must name the backup role of control plane {composite} in namespace "
                f"{namespace}, {wanted} ({namespace}-<name>-<hash of namespace/name>-backup)"
            )
            raise WebIdentityRefusedError(msg)


def pod_irsa_role(environ: Mapping[str, str]) -> str:
    """The IRSA role of this pod: ``AWS_ROLE_ARN`` when EKS also projected a token; else ""."""
    if not environ.get(TOKEN_FILE_VARIABLE):
        return ""
    return environ.get(ROLE_ARN_VARIABLE, "").strip()


def account_setting(values: Iterable[str]) -> tuple[frozenset[str], bool]:
    """``--web-identity-role-account``: the accounts listed, and whether none was.

    Nothing listed: no account, and the IRSA role's is the default; ``none`` alone:
    no account and no default (off).

    Raises:
        ValueError: naming the value and the rule.
    """
    listed = _items(values)
    if listed == [NONE]:
        return frozenset(), False
    if NONE in listed:
        msg = f"{NONE!r} turns WebIdentity off and cannot be listed with accounts"
        raise ValueError(msg)
    return parse_accounts(listed), not listed


def parse_accounts(values: Iterable[str]) -> frozenset[str]:
    """AWS account ids, each 12 digits; an entry may hold several separated by spaces.

    Raises:
        ValueError: naming the value and the rule.
    """
    accounts = _items(values)
    for item in accounts:
        if not ACCOUNT.fullmatch(item):
            msg = f"{item!r} is not an AWS account id (12 digits)"
            raise ValueError(msg)
    return frozenset(accounts)


def parse_partition(value: str) -> str:
    """An AWS partition: ``aws``, ``aws-cn``, ``aws-us-gov``, ...

    Raises:
        ValueError: naming the value and the rule.
    """
    partition = value.strip()
    if not PARTITION.fullmatch(partition):
        msg = f"{partition!r} is not an AWS partition (aws, aws-cn, aws-us-gov, ...)"
        raise ValueError(msg)
    return partition


def parse_denied(values: Iterable[str]) -> frozenset[str]:
    """IAM role ARNs, in lower case; an entry may hold several separated by spaces.

    Raises:
        ValueError: naming the value and the rule.
    """
    roles = _items(values)
    for item in roles:
        if not ROLE_ARN.fullmatch(item):
            msg = f"{item!r} is not an IAM role's ARN (arn:<partition>:iam::<account>:role/<name>)"
            raise ValueError(msg)
    return frozenset(role.lower() for role in roles)


def _items(values: Iterable[str]) -> list[str]:
    """Each entry of ``values``, which may hold several separated by spaces or commas."""
    return [item for value in values for item in value.replace(",", " ").split()]
