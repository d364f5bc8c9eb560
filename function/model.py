"""Pydantic models of what the function reads: the composite's spec and its input.

The models apply the contract's defaults, so a composite rendered outside a
cluster (where no XRD defaulting runs) composes the same objects as one that
went through the API server.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from function import allowlists, expressions, rules

INPUT_API_VERSION = "controlplane.fn.acme.io/v1beta1"
INPUT_KIND = "Input"
MINIMUM_SYNC_INTERVAL = timedelta(seconds=10)
# Each stage is a Kustomization reconciled on every interval: a bound keeps one
# composite from loading Flux without limit. The input's source.maxStages may
# lower it, never raise it.
MAX_STAGES = 8
# How long a team's stage may hold one of kustomize-controller's workers
# waiting for its health checks, unless the input says otherwise.
DEFAULT_MAX_TIMEOUT = "30m"
MAX_EXPRESSION_LENGTH = 4096
# Every team's expressions are parsed by this function on one server: a composite's
# together stay within this many characters (a few hundred milliseconds to parse).
MAX_TEAM_CHARACTERS = 16_384

# The platform variables the function sets in every Kustomization's postBuild.substitute.
CONTROLPLANE_NAME = "CONTROLPLANE_NAME"
CONTROLPLANE_NAMESPACE = "CONTROLPLANE_NAMESPACE"
BACKUP_BUCKET = "BACKUP_BUCKET"
BACKUP_PREFIX = "BACKUP_PREFIX"
BACKUP_REGION = "BACKUP_REGION"
FUNCTION_VARIABLES = (
    CONTROLPLANE_NAME,
    CONTROLPLANE_NAMESPACE,
    BACKUP_BUCKET,
    BACKUP_PREFIX,
    BACKUP_REGION,
)


class _Strict(BaseModel):
    """A nested object of ours: unknown fields are typos, so they are refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _positive_duration(text: str) -> str:
    return rules.duration_at_least(text, timedelta(seconds=1))


def _timeout(text: str) -> str:
    return rules.duration_at_least(text, timedelta(seconds=1), rules.TIMEOUT_UNITS)


def _sync_interval(text: str) -> str:
    return rules.duration_at_least(text, MINIMUM_SYNC_INTERVAL)


def _drill_interval(text: str) -> str:
    # As the backup controller reads a BackupSchedule's spec.verify.interval.
    return rules.duration_at_least(text, timedelta(hours=1))


def _k8s_name(text: str) -> str:
    return rules.check_pattern(text, rules.DNS_SUBDOMAIN, "a lowercase DNS subdomain", 253)


def _k8s_label(text: str) -> str:
    return rules.check_pattern(text, rules.DNS_LABEL, "a lowercase DNS label", 63)


def _bucket(text: str) -> str:
    return rules.check_pattern(text, rules.S3_BUCKET, "an S3 bucket name", 63)


def _region(text: str) -> str:
    return rules.check_pattern(text, rules.AWS_REGION, "an AWS region such as eu-west-1", 32)


def _semver(text: str) -> str:
    return rules.check_pattern(text, rules.SEMVER, "a version such as 2.1.3 (no leading v)", 64)


def _arn(text: str) -> str:
    return rules.check_pattern(text, rules.ARN, "an AWS ARN", 2048)


def _api_version(text: str) -> str:
    return rules.check_pattern(text, rules.API_VERSION, "an apiVersion such as example.org/v1", 316)


def _kind(text: str) -> str:
    return rules.check_pattern(text, rules.KIND, "a kind such as Provider (CamelCase)", 63)


def _variable_name(text: str) -> str:
    return rules.check_pattern(
        text, rules.VARIABLE_NAME, "a variable name of letters, digits and _", 253
    )


Duration = Annotated[str, AfterValidator(_positive_duration)]
SyncInterval = Annotated[str, AfterValidator(_sync_interval)]
Timeout = Annotated[str, AfterValidator(_timeout)]
DrillInterval = Annotated[str, AfterValidator(_drill_interval)]
KubernetesName = Annotated[str, AfterValidator(_k8s_name)]
# A type left out of backups: "resource.group", or "resource" for the core group,
# as a Backup's spec.excludedResources takes it (317: a plural and a group, 63 + 1 + 253).
ExcludedResource = Annotated[
    str,
    AfterValidator(
        lambda text: rules.check_pattern(
            text, rules.DNS_SUBDOMAIN, 'a lowercase "resource.group"', 317
        )
    ),
]
MAX_EXCLUDED_RESOURCES = 256
KubernetesLabel = Annotated[str, AfterValidator(_k8s_label)]
BucketName = Annotated[str, AfterValidator(_bucket)]
Region = Annotated[str, AfterValidator(_region)]
Version = Annotated[str, AfterValidator(_semver)]
Arn = Annotated[str, AfterValidator(_arn)]
Cron = Annotated[str, AfterValidator(rules.check_cron)]
ApiVersion = Annotated[str, AfterValidator(_api_version)]
Kind = Annotated[str, AfterValidator(_kind)]
CelExpression = Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION_LENGTH)]
VariableName = Annotated[str, AfterValidator(_variable_name)]
GitUrl = Annotated[str, AfterValidator(rules.check_git_url)]


class Channel(StrEnum):
    """Crossplane's auto-upgrade channels."""

    NONE = "None"
    PATCH = "Patch"
    STABLE = "Stable"
    RAPID = "Rapid"


class GitRef(_Strict):
    """The git reference to sync: exactly one of its fields."""

    branch: str | None = None
    tag: str | None = None
    semver: str | None = None
    commit: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [
            name
            for name, value in (
                ("branch", self.branch),
                ("tag", self.tag),
                ("semver", self.semver),
                ("commit", self.commit),
            )
            if value
        ]
        if len(chosen) != 1:
            got = ", ".join(chosen) if chosen else "none"
            msg = f"exactly one of branch, tag, semver, commit must be set (got {got})"
            raise ValueError(msg)
        return self


class LocalSecretRef(_Strict):
    """A secret in the composite's namespace."""

    name: KubernetesName


class HealthCheckExpr(_Strict):
    """A Flux health check: CEL expressions over each object of a group and kind.

    Without ``kind`` it covers every kind of the group that no check names
    (Flux's ``healthCheckExprs`` in kustomize-controller v1.9, fluxcd/pkg
    ``runtime/cel/status_reader.go``: a check is keyed by group and kind, never
    by version, and a kind-less one by its group alone).
    """

    api_version: ApiVersion
    kind: Kind | None = None
    current: CelExpression
    failed: CelExpression | None = None
    in_progress: CelExpression | None = None


class Stage(_Strict):
    """One Kustomization of a staged source, applied after the stages it depends on."""

    name: KubernetesLabel
    path: Annotated[str, Field(min_length=1, max_length=1024)]
    timeout: Duration | None = None
    depends_on: Annotated[tuple[KubernetesLabel, ...], Field(max_length=MAX_STAGES)] = ()
    health_check_exprs: Annotated[tuple[HealthCheckExpr, ...], Field(max_length=16)] = ()


class SubstituteReference(_Strict):
    """A ConfigMap or Secret in the composite's namespace whose keys are variables."""

    kind: Literal["ConfigMap", "Secret"]
    name: KubernetesName
    optional: bool = False


class Decryption(_Strict):
    """SOPS decryption with the (age) keys of a Secret in the composite's namespace."""

    secret_ref: LocalSecretRef


class Source(_Strict):
    """The git sync: a Flux GitRepository and one Kustomization per stage."""

    url: GitUrl
    ref: GitRef = GitRef(branch="main")
    path: str = "./"
    stages: Annotated[tuple[Stage, ...], Field(min_length=1, max_length=MAX_STAGES)] | None = None
    interval: SyncInterval = "1m"
    timeout: Timeout = "5m"
    secret_ref: LocalSecretRef | None = None
    prune: bool = True
    suspend: bool = False
    substitute: Annotated[dict[VariableName, str], Field(max_length=64)] = Field(
        default_factory=dict
    )
    substitute_from: Annotated[tuple[SubstituteReference, ...], Field(max_length=8)] = ()
    decryption: Decryption | None = None
    force: bool = False


class BucketRef(_Strict):
    """An existing bucket to write into, or only the region of a dedicated one."""

    name: BucketName | None = None
    region: Region | None = None
    # A dedicated bucket outlives the composite, so its final and earlier backups stay restorable.
    retain_on_delete: bool = True


class Verify(_Strict):
    """Restore drills of the schedule's newest Completed Backup (BackupSchedule spec.verify)."""

    interval: DrillInterval
    deadline: Duration | None = None


class Backup(_Strict):
    """Recurring backups into S3."""

    schedule: Cron | None = None
    ttl: Duration | None = None
    suspend: bool = False
    # A last Backup is taken before the control plane is deleted.
    final_backup: bool = True
    # Types every Backup of the schedule leaves out.
    excluded_resources: tuple[ExcludedResource, ...] = Field(
        default=(), max_length=MAX_EXCLUDED_RESOURCES
    )
    bucket: BucketRef = BucketRef()
    verify: Verify | None = None


class Restore(_Strict):
    """The backup to restore the instance from when it is first created.

    Exactly one of a Backup's name, or a control plane whose newest Completed
    Backup is taken (``function.restore``).
    """

    backup_name: KubernetesName | None = None
    from_control_plane: KubernetesName | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [
            name
            for name, value in (
                ("backupName", self.backup_name),
                ("fromControlPlane", self.from_control_plane),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            got = ", ".join(chosen) if chosen else "none"
            msg = f"exactly one of backupName, fromControlPlane must be set (got {got})"
            raise ValueError(msg)
        return self


class ControlPlaneSpec(BaseModel):
    """The composite's ``spec``. Crossplane's own fields beside ours are ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    crossplane_version: Version | None = None
    channel: Channel = Channel.STABLE
    class_: str | None = Field(default=None, alias="class")
    source: Source | None = None
    backup: Backup | None = None
    restore: Restore | None = None

    @model_validator(mode="after")
    def _pinned_needs_version(self) -> Self:
        if self.channel is Channel.NONE and self.crossplane_version is None:
            msg = "channel None needs crossplaneVersion to be set"
            raise ValueError(msg)
        return self


class ProviderConfigRef(_Strict):
    """A reference to a provider config."""

    kind: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"
    name: KubernetesName = "default"


class InstanceSettings(_Strict):
    """How Instances are made."""

    provider_config_ref: ProviderConfigRef = ProviderConfigRef()


class AwsSettings(_Strict):
    """Where and how AWS objects are made."""

    region: Region = "us-east-1"
    partition: Literal["aws", "aws-cn", "aws-us-gov"] = "aws"
    provider_config_ref: ProviderConfigRef = ProviderConfigRef()


class ServiceAccount(_Strict):
    """A Kubernetes service account."""

    namespace: KubernetesLabel
    name: KubernetesName


class IrsaTrust(_Strict):
    """IAM Roles for Service Accounts: the cluster's OIDC provider and one subject."""

    oidc_provider_arn: Arn
    service_account: ServiceAccount

    @property
    def issuer(self) -> str:
        """The OIDC issuer host and path, as IAM condition keys spell it."""
        return self.oidc_provider_arn.split(":oidc-provider/", 1)[-1]


class PodIdentityTrust(_Strict):
    """EKS Pod Identity: the controller's own Pod Identity role, which chains into the team role."""

    controller_role_arn: Arn


class Trust(_Strict):
    """Who may assume the backup role: exactly one mechanism."""

    irsa: IrsaTrust | None = None
    pod_identity: PodIdentityTrust | None = None
    role_arn: Arn | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [
            name
            for name, value in (
                ("irsa", self.irsa),
                ("podIdentity", self.pod_identity),
                ("roleArn", self.role_arn),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            got = ", ".join(chosen) if chosen else "none"
            msg = f"exactly one of irsa, podIdentity, roleArn must be set (got {got})"
            raise ValueError(msg)
        return self


class BackupDefaults(_Strict):
    """Defaults for a composite's ``spec.backup``."""

    schedule: Cron = "0 */6 * * *"
    ttl: Duration = "168h"


def _bucket_prefix(text: str) -> str:
    return rules.check_pattern(text, rules.S3_BUCKET, "an S3 bucket name prefix", 40)


BucketPattern = Annotated[str, AfterValidator(allowlists.check_bucket_pattern)]
HostPattern = Annotated[str, AfterValidator(allowlists.check_host_pattern)]


class BackupSettings(_Strict):
    """How backups are stored and who may write them."""

    bucket_name_prefix: Annotated[str, AfterValidator(_bucket_prefix)]
    kms_key_arn: Annotated[str, AfterValidator(lambda v: _arn(v) if v else v)] = ""
    trust: Trust
    defaults: BackupDefaults = BackupDefaults()
    # Existing buckets a composite may name in spec.backup.bucket.name: none
    # unless the operator lists them, so teams cannot write into others' buckets.
    allowed_buckets: tuple[BucketPattern, ...] = ()


class SourceSettings(_Strict):
    """What the platform allows and adds to every composite's spec.source.

    Which git URLs it may name (see ``function.allowlists``), the platform's
    own variables and health checks.
    """

    allowed_hosts: tuple[HostPattern, ...] = (allowlists.ANY_PUBLIC_HOST,)
    # A security switch: on only for the boolean true, never for a string such as "yes".
    allow_http: StrictBool = Field(default=False, alias="allowHTTP")
    # Platform variables of the operator's own, beside the function's.
    variables: Annotated[dict[VariableName, str], Field(max_length=64)] = Field(
        default_factory=dict
    )
    # Health checks added to the Crossplane-aware defaults of every Kustomization.
    health_check_exprs: Annotated[tuple[HealthCheckExpr, ...], Field(max_length=64)] = ()
    # The largest stage or source timeout a team may ask for: a stage waiting for
    # its health checks holds a kustomize-controller worker that long.
    max_timeout: Duration = DEFAULT_MAX_TIMEOUT
    max_stages: Annotated[int, Field(ge=1, le=MAX_STAGES)] = MAX_STAGES
    # A security switch: false refuses every health check a team writes.
    team_health_checks: StrictBool = True

    @field_validator("variables")
    @classmethod
    def _no_function_variable(cls, variables: dict[str, str]) -> dict[str, str]:
        taken = sorted(set(variables) & set(FUNCTION_VARIABLES))
        if taken:
            msg = f"{', '.join(taken)} is set by the function itself"
            raise ValueError(msg)
        return variables


class LegacySettings(_Strict):
    """Settings for composites of the legacy (v1, cluster-scoped) XRD."""

    namespace: KubernetesLabel = "controlplane-system"


class Input(_Strict):
    """The function input (``controlplane.fn.acme.io/v1beta1`` Input)."""

    api_version: Literal["controlplane.fn.acme.io/v1beta1"]
    kind: Literal["Input"]
    metadata: dict[str, Any] | None = None
    instance: InstanceSettings = InstanceSettings()
    aws: AwsSettings = AwsSettings()
    backup: BackupSettings | None = None
    source: SourceSettings = SourceSettings()
    legacy: LegacySettings = LegacySettings()


class InvalidError(Exception):
    """Input that breaks a rule; ``str()`` names each field path and its rule."""


def describe(error: ValidationError, root: str) -> str:
    """Turn pydantic's errors into one line per field: ``root.path: rule``."""
    lines = []
    for item in error.errors(include_url=False):
        path = root
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "is not a known field"
        elif item["type"] == "missing":
            message = "is required"
        lines.append(f"{path}: {message}")
    return "; ".join(lines)


def parse_spec(spec: Any) -> ControlPlaneSpec:
    """Parse a composite's spec.

    Raises:
        InvalidError: the spec breaks a rule of the contract.
    """
    if not isinstance(spec, dict):
        msg = "spec: must be an object"
        raise InvalidError(msg)
    try:
        parsed = ControlPlaneSpec.model_validate(spec, by_alias=True)
    except ValidationError as error:
        raise InvalidError(describe(error, "spec")) from None
    if parsed.source is not None and parsed.source.stages is not None:
        _check_stage_order(parsed.source.stages)
    return parsed


def _check_stage_order(stages: tuple[Stage, ...]) -> None:
    """Stage names are unique and each stage depends only on earlier ones (so no cycles).

    Raises:
        InvalidError: naming the first offending field path.
    """
    earlier: set[str] = set()
    for index, stage in enumerate(stages):
        path = f"spec.source.stages[{index}]"
        if stage.name in earlier:
            msg = f"{path}.name: {stage.name!r} names an earlier stage too; stage names are unique"
            raise InvalidError(msg)
        for position, needed in enumerate(stage.depends_on):
            if needed not in earlier:
                what = "itself" if needed == stage.name else "no earlier stage"
                msg = (
                    f"{path}.dependsOn[{position}]: {needed!r} names {what}; "
                    "a stage depends only on stages listed before it"
                )
                raise InvalidError(msg)
        earlier.add(stage.name)


def parse_input(raw: Any) -> Input:
    """Parse the function input; an input parsed already is returned as it is.

    Raises:
        InvalidError: the input is missing or breaks a rule.
    """
    if isinstance(raw, Input):
        return raw
    if not raw:
        msg = f"input: a {INPUT_API_VERSION} {INPUT_KIND} is required"
        raise InvalidError(msg)
    if not isinstance(raw, dict):
        msg = "input: must be an object"
        raise InvalidError(msg)
    try:
        return Input.model_validate(raw, by_alias=True)
    except ValidationError as error:
        raise InvalidError(describe(error, "input")) from None


def _check_team_variables(source: Source, settings: Input) -> None:
    """A team's variable may not shadow a platform variable.

    Raises:
        InvalidError: naming the field of the first such variable.
    """
    platform = set(FUNCTION_VARIABLES) | set(settings.source.variables)
    for name in sorted(source.substitute):
        if name in platform:
            msg = (
                f"spec.source.substitute.{name}: is a platform variable, set by the platform; "
                "choose another name"
            )
            raise InvalidError(msg)


def _check_source_bounds(source: Source, settings: SourceSettings) -> None:
    """Hold a team's sync to the operator's bounds on the shared Flux controllers.

    Stages per composite, every timeout, and the health expressions, which
    kustomize-controller evaluates in its own memory (``function.expressions``).

    Raises:
        InvalidError: naming the first field out of bounds and the bound.
    """
    stages = source.stages or ()
    if len(stages) > settings.max_stages:
        msg = (
            f"spec.source.stages: at most {settings.max_stages} stages "
            f"(the input's source.maxStages; got {len(stages)})"
        )
        raise InvalidError(msg)
    most = rules.parse_duration(settings.max_timeout)
    timeouts = [("spec.source.timeout", source.timeout)] + [
        (f"spec.source.stages[{index}].timeout", stage.timeout)
        for index, stage in enumerate(stages)
        if stage.timeout is not None
    ]
    for path, timeout in timeouts:
        if rules.parse_duration(timeout) > most:
            msg = (
                f"{path}: must be at most {settings.max_timeout}, the input's "
                f"source.maxTimeout (got {timeout})"
            )
            raise InvalidError(msg)
    written = sum(
        len(expression)
        for stage in stages
        for check in stage.health_check_exprs
        for expression in (check.current, check.in_progress, check.failed)
        if expression is not None
    )
    if written > MAX_TEAM_CHARACTERS:
        msg = (
            f"spec.source.stages: the stages' health expressions hold {written} characters, "
            f"more than the {MAX_TEAM_CHARACTERS} a composite may have checked"
        )
        raise InvalidError(msg)
    for index, stage in enumerate(stages):
        _check_team_expressions(f"spec.source.stages[{index}]", stage, settings)


# The expressions of a health check, as the composite spells their fields.
_EXPRESSION_FIELDS = (("current", "current"), ("in_progress", "inProgress"), ("failed", "failed"))


def _check_team_expressions(path: str, stage: Stage, settings: SourceSettings) -> None:
    if stage.health_check_exprs and not settings.team_health_checks:
        msg = (
            f"{path}.healthCheckExprs: the platform takes no team health checks "
            "(the input's source.teamHealthChecks is false)"
        )
        raise InvalidError(msg)
    for index, check in enumerate(stage.health_check_exprs):
        for attribute, field in _EXPRESSION_FIELDS:
            expression = getattr(check, attribute)
            if expression is None:
                continue
            try:
                expressions.check(expression)
            except expressions.RefusedError as error:
                msg = f"{path}.healthCheckExprs[{index}].{field}: {error}"
                raise InvalidError(msg) from None


BUCKET_NOT_ALLOWED = (
    "spec.backup.bucket.name: must be an existing bucket the function input's "
    "backup.allowedBuckets allows (none unless the operator lists them); "
    "leave it unset for a bucket of the composite's own"
)


def check_allowed(spec: ControlPlaneSpec, settings: Input) -> None:
    """Hold a parsed spec to the input's allow-lists and its platform variables.

    Existing buckets and git hosts must be allowed; a team variable may not
    take a platform variable's name.

    Neither message quotes the operator's patterns, nor the URL, which may hold a user name.

    Raises:
        InvalidError: the spec names a bucket or a git URL the input does not allow,
            or a platform variable.
    """
    if spec.source is not None:
        _check_team_variables(spec.source, settings)
        _check_source_bounds(spec.source, settings.source)
        try:
            allowlists.check_source_url(
                spec.source.url,
                settings.source.allowed_hosts,
                allow_http=settings.source.allow_http,
            )
        except ValueError as error:
            raise InvalidError(f"spec.source.url: {error}") from None
    bucket = spec.backup.bucket.name if spec.backup is not None else None
    allowed = settings.backup.allowed_buckets if settings.backup is not None else ()
    if bucket is not None and not allowlists.bucket_allowed(bucket, allowed):
        raise InvalidError(BUCKET_NOT_ALLOWED)
