"""The pure composition: observed state and input in, an outcome out.

No gRPC and no I/O here, so every rule of the contract is tested directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from function import model, restore
from function.model import ControlPlaneSpec, Input, InvalidError
from function.names import AwsNames, Names, ObservedAwsNames
from function.observed import LAST_BACKUP, Condition, Observed, Resource, condition, dig
from function.resources import flux, iam, instance, schedule, storage, usage
from function.resources.target import EXTERNAL_NAME, Target

CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"

# Crossplane may serve a cached response this long. Short while something is
# awaited, so a new Ready or ARN is picked up soon; longer once all is settled.
PENDING_TTL = timedelta(seconds=15)
SETTLED_TTL = timedelta(minutes=2)

INSTANCE = "instance"
GIT_REPOSITORY = "git-repository"
KUSTOMIZATION = "kustomization"
BACKUP_ROLE = "backup-role"
BACKUP_POLICY = "backup-policy"
BACKUP_ATTACHMENT = "backup-role-policy-attachment"
BACKUP_SCHEDULE = "backup-schedule"
BACKUP_BUCKET = "backup-bucket"

# (used, user): the user must be deleted before what it uses. The schedule's final
# Backup needs the Instance, the role with its policy, and (when it is not retained)
# the bucket. Every Kustomization (one per stage) uses the Instance as well: those
# pairs are added as the stages are composed.
DEPENDENCIES = (
    (INSTANCE, BACKUP_SCHEDULE),
    (BACKUP_ROLE, BACKUP_SCHEDULE),
    (BACKUP_POLICY, BACKUP_SCHEDULE),
    (BACKUP_ATTACHMENT, BACKUP_SCHEDULE),
    (BACKUP_BUCKET, BACKUP_SCHEDULE),
)

INSTANCE_READY = "InstanceReady"
SOURCE_SYNCED = "SourceSynced"
BACKUPS_READY = "BackupsReady"
NOT_CONFIGURED = "NotConfigured"
PROGRESSING = "Progressing"
WAITING_FOR_INSTANCE = "WaitingForInstance"
WAITING_FOR_ROLE_ARN = "WaitingForRoleArn"
# spec.restore.fromControlPlane: the Backups are being fetched, or none is Completed yet.
LOOKING_FOR_BACKUP = "LookingForBackup"
NO_BACKUP_TO_RESTORE = "NoBackupToRestore"
# A composite condition's message at most: a composed object's own message (an AWS
# error with its request id, a Flux health check) is passed on, cut to this.
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class Desired:
    """One desired composed resource and whether it is ready."""

    body: dict[str, Any]
    ready: bool


@dataclass(frozen=True)
class BackupLocation:
    """Where one composite's backups are written, and the AWS names of its own resources."""

    bucket: str
    region: str
    aws: AwsNames


@dataclass(frozen=True)
class Outcome:
    """Everything the function answers with, free of gRPC types."""

    resources: dict[str, Desired]
    status: dict[str, Any]
    conditions: tuple[Condition, ...]
    connection_details: dict[str, bytes] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    ttl: timedelta = SETTLED_TTL
    # Resources Crossplane is to fetch and pass to the next call (function.restore).
    requirements: tuple[restore.Requirement, ...] = ()
    # The composite is not Ready whatever its composed resources are: its Instance is
    # held back (a composite composing nothing would otherwise be Ready).
    held_back: bool = False


def compose(observed: Observed, raw_input: Any) -> Outcome:
    """Compose one ControlPlane composite.

    Raises:
        InvalidError: the composite or the input breaks a rule; its message
            names the field path and the rule.
    """
    settings = model.parse_input(raw_input)
    composite = observed.composite
    spec = model.parse_spec(composite.get("spec"))
    if spec.backup is not None and settings.backup is None:
        msg = "input.backup: is required when spec.backup is set"
        raise InvalidError(msg)
    model.check_allowed(spec, settings)
    if spec.source is not None:
        flux.check_health_checks(
            settings.source.health_check_exprs,
            tuple(
                (f"spec.source.stages[{index}]", stage.health_check_exprs)
                for index, stage in enumerate(spec.source.stages or ())
            ),
        )
    target = _target(composite, spec, settings)
    return _Composition(target, observed).outcome()


def _target(composite: Mapping[str, Any], spec: ControlPlaneSpec, settings: Input) -> Target:
    name = dig(composite, "metadata", "name")
    if not isinstance(name, str) or not name:
        msg = "metadata.name: is required"
        raise InvalidError(msg)
    namespace = dig(composite, "metadata", "namespace")
    if namespace:
        return Target(spec, settings, Names.of(namespace, name), legacy=False)
    return Target(
        spec, settings, Names.of(_legacy_namespace(composite, spec, settings), name), legacy=True
    )


def _legacy_namespace(composite: Mapping[str, Any], spec: ControlPlaneSpec, settings: Input) -> str:
    """The namespace a legacy (cluster-scoped) composite's objects go to: its claim's.

    Crossplane binds the composite to its claim in ``spec.claimRef``; the label
    is a copy anyone who may create the composite can write, so it never
    chooses. A composite with no claim may not read a namespace's git
    credentials or Backups: without ``source`` and ``restore`` it composes into
    the input's namespace.

    Raises:
        InvalidError: the label disagrees with the claim, or an unclaimed
            composite asks for a source or a restore.
    """
    claimed = dig(composite, "spec", "claimRef", "namespace")
    labels = dig(composite, "metadata", "labels") or {}
    label = labels.get(CLAIM_NAMESPACE_LABEL)
    if claimed and isinstance(claimed, str):
        if label is not None and label != claimed:
            msg = (
                f"metadata.labels[{CLAIM_NAMESPACE_LABEL}]: must be the namespace of the claim "
                "the composite is bound to (spec.claimRef.namespace)"
            )
            raise InvalidError(msg)
        return claimed
    asked = [
        field for field, value in (("source", spec.source), ("restore", spec.restore)) if value
    ]
    if asked:
        fields = " and ".join(f"spec.{field}" for field in asked)
        msg = (
            f"spec.claimRef: a legacy composite with {fields} must be bound to a claim "
            "(it is composed only into its claim's namespace)"
        )
        raise InvalidError(msg)
    if label is not None:
        msg = (
            f"metadata.labels[{CLAIM_NAMESPACE_LABEL}]: names a claim's namespace but the "
            "composite is bound to no claim (spec.claimRef)"
        )
        raise InvalidError(msg)
    return settings.legacy.namespace


class _Composition:
    """One run of the composition, so each step reads the state it needs by name."""

    def __init__(self, target: Target, observed: Observed) -> None:
        self.target = target
        self.composite = observed.composite
        self.observed = observed.resources
        self.required = observed.required
        # Every step asks whether some resource is ready, most of them more than once.
        self.readiness = {name: seen.ready.true for name, seen in self.observed.items()}
        self.spec = target.spec
        self.desired: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.status: dict[str, Any] = {}
        self.conditions: list[Condition] = []
        self.requirements: list[restore.Requirement] = []
        self.awaiting = False
        self.held_back = False
        # The composition resource names of the Kustomizations composed, in stage order.
        self.kustomizations: list[str] = []

    def outcome(self) -> Outcome:
        self._instance()
        self._source()
        self._backup()
        self._usages()
        resources = {name: Desired(body, self._ready(name)) for name, body in self.desired.items()}
        settled = not self.awaiting and all(d.ready for d in resources.values())
        return Outcome(
            resources=resources,
            status=self.status,
            conditions=tuple(self.conditions),
            connection_details=self._connection_details(),
            warnings=tuple(self.warnings),
            ttl=SETTLED_TTL if settled else PENDING_TTL,
            requirements=tuple(self.requirements),
            held_back=self.held_back,
        )

    def _ready(self, name: str) -> bool:
        return self.readiness.get(name, False)

    def _instance(self) -> None:
        names = self.target.names
        seen = self.observed.get(INSTANCE)
        restoring = self._restore_from(seen)
        if isinstance(restoring, Condition):
            # The Backup to restore is not known yet: the Instance waits, it never
            # comes up empty.
            self.awaiting = self.held_back = True
        else:
            self.desired[INSTANCE] = instance.instance(self.target, restoring)
        ready = self._ready(INSTANCE)
        status: dict[str, Any] = {
            "ready": ready,
            "kubeconfigSecretRef": {
                "name": names.kubeconfig_secret,
                "key": instance.KUBECONFIG_KEY,
            },
        }
        for key in ("id", "crossplaneVersion"):
            # crossplaneVersion: what the Space runs now, which it may have upgraded.
            observed = seen.get("status", "atProvider", key) if seen is not None else None
            if observed:
                status[key] = observed
        self.status["instance"] = status
        failed = self._first_failure(INSTANCE_READY, (INSTANCE,))
        if failed is not None:
            self.conditions.append(failed)
        elif ready:
            self.conditions.append(Condition(INSTANCE_READY, "True", "Available"))
        elif isinstance(restoring, Condition):
            self.conditions.append(restoring)
        else:
            self.conditions.append(
                _waiting(
                    INSTANCE_READY, WAITING_FOR_INSTANCE, seen, "the Instance is being created"
                )
            )

    def _restore_from(self, seen: Resource | None) -> str | Condition | None:
        """The Backup the Instance is created from: None for none, a Condition while unknown.

        Restore is asked for only when the Instance is created, and then kept as
        it was: the observed Instance's, else the one this composite recorded in
        its status (``fromControlPlane`` is resolved once, never again).
        """
        asked = self.spec.restore
        if seen is not None:
            kept = seen.get("spec", "forProvider", "initialRestorationFrom", "backupRef", "name")
            if asked and not kept:
                self.warnings.append(
                    "spec.restore is honoured only when the instance is first created; "
                    "the existing instance is left as it is"
                )
            # Kept even with no restore asked: the field is immutable on the Instance.
            return self._restoring(str(kept)) if kept else None
        if asked is None:
            return None
        if asked.backup_name is not None:
            return self._restoring(asked.backup_name)
        recorded = dig(self.composite, "status", "restore", "backupName")
        if isinstance(recorded, str) and recorded:
            return self._restoring(recorded)
        return self._latest_backup(str(asked.from_control_plane))

    def _restoring(self, backup: str) -> str:
        self.status["restore"] = {"backupName": backup}
        return backup

    def _latest_backup(self, control_plane: str) -> str | Condition:
        """The newest Completed Backup of ``control_plane``, from the Backups Crossplane fetched."""
        namespace = self.target.namespace
        wanted = Names.of(namespace, control_plane).instance
        asked = restore.requirement(namespace, wanted)
        self.requirements.append(asked)
        fetched = self.required.get(asked.name)
        if fetched is None:
            return Condition(
                INSTANCE_READY,
                "False",
                LOOKING_FOR_BACKUP,
                f"looking for the newest Completed Backup of control plane {control_plane} "
                f"in namespace {namespace} (spec.restore.fromControlPlane)",
            )
        chosen = restore.latest(fetched, namespace, wanted)
        if chosen is None:
            message = _bounded(
                f"no Completed Backup of control plane {control_plane} in namespace "
                f"{namespace} to restore from (spec.restore.fromControlPlane): "
                f"{restore.why_none(fetched, namespace, wanted)}; the Instance is created "
                "once there is one"
            )
            self.warnings.append(message)
            return Condition(INSTANCE_READY, "False", NO_BACKUP_TO_RESTORE, message)
        return self._restoring(chosen)

    def _source(self) -> None:
        source = self.spec.source
        if source is None:
            self.conditions.append(
                Condition(SOURCE_SYNCED, "True", NOT_CONFIGURED, "spec.source is not set")
            )
            return
        self.desired[GIT_REPOSITORY] = flux.git_repository(self.target, source)
        variables = self._variables(source)
        stages = self._stages(source)
        for resource, stage in stages:
            # Compose a stage's Kustomization once the kubeconfig exists; never
            # withdraw it again when the instance's readiness flickers.
            if self._ready(INSTANCE) or resource in self.observed:
                self.desired[resource] = flux.kustomization(self.target, source, stage, variables)
                self.kustomizations.append(resource)
            else:
                self.awaiting = True
        self.status["source"] = self._source_status(source, stages)
        self.conditions.append(self._source_synced(stages))

    def _stages(self, source: model.Source) -> tuple[tuple[str, flux.Stage], ...]:
        """(composition resource name, stage) of each Kustomization, in the source's order.

        Without ``stages`` the one Kustomization keeps the names it always had.
        """
        names = self.target.names
        if source.stages is None:
            return ((KUSTOMIZATION, flux.Stage(names.instance, source.path, source.timeout)),)
        return tuple(
            (
                f"{KUSTOMIZATION}-{stage.name}",
                flux.Stage(
                    names.stage(stage.name),
                    stage.path,
                    stage.timeout or source.timeout,
                    tuple(names.stage(needed) for needed in stage.depends_on),
                    stage.health_check_exprs,
                ),
            )
            for stage in source.stages
        )

    def _variables(self, source: model.Source) -> dict[str, str]:
        """The function's variables, the input's and the team's.

        ``model.check_allowed`` has refused a team variable of a platform name, so
        none overrides another.
        """
        names = self.target.names
        variables = {
            model.CONTROLPLANE_NAME: names.composite,
            model.CONTROLPLANE_NAMESPACE: names.namespace,
        }
        location = self._backup_location()
        if location is not None:
            variables[model.BACKUP_BUCKET] = location.bucket
            variables[model.BACKUP_PREFIX] = names.backup_prefix
            variables[model.BACKUP_REGION] = location.region
        return variables | self.target.settings.source.variables | source.substitute

    def _source_status(
        self, source: model.Source, stages: tuple[tuple[str, flux.Stage], ...]
    ) -> dict[str, Any]:
        resources = [resource for resource, _ in stages]
        status: dict[str, Any] = {
            "ready": self._ready(GIT_REPOSITORY) and all(self._ready(r) for r in resources)
        }
        artifact = self._observed_value(GIT_REPOSITORY, "status", "artifact", "revision")
        # The last stage's revision is the one applied all the way through.
        applied = [self._observed_value(r, "status", "lastAppliedRevision") for r in resources]
        revision = _first(*reversed(applied), artifact)
        if revision:
            status["revision"] = revision
        # The first stage is the first to try a new revision.
        attempted = _first(
            *(self._observed_value(r, "status", "lastAttemptedRevision") for r in resources),
            artifact,
        )
        if attempted:
            status["lastAttemptedRevision"] = attempted
        if source.stages is not None:
            status["stages"] = [
                self._stage_status(stage.name, resource)
                for stage, (resource, _) in zip(source.stages, stages, strict=True)
            ]
        return status

    def _stage_status(self, name: str, resource: str) -> dict[str, Any]:
        seen = self.observed.get(resource)
        return {
            "name": name,
            "ready": self._ready(resource),
            "revision": str(self._observed_value(resource, "status", "lastAppliedRevision") or ""),
            "message": seen.ready.message if seen is not None else "",
        }

    def _source_synced(self, stages: tuple[tuple[str, flux.Stage], ...]) -> Condition:
        """True when the source is fetched and every stage is Ready at its revision.

        Otherwise the first part that is not, in Flux's words.
        """
        resources = tuple(resource for resource, _ in stages)
        failed = self._first_failure(SOURCE_SYNCED, (GIT_REPOSITORY, *resources))
        if failed is not None:
            return failed
        if any(resource not in self.desired for resource in resources):
            return Condition(
                SOURCE_SYNCED,
                "False",
                WAITING_FOR_INSTANCE,
                "the Kustomizations are composed once the Instance is ready"
                if len(resources) > 1
                else "the Kustomization is composed once the Instance is ready",
            )
        summary = self._summary(SOURCE_SYNCED, (GIT_REPOSITORY, *resources))
        if summary.status != "True":
            return summary
        current = self._observed_value(GIT_REPOSITORY, "status", "artifact", "revision")
        for resource, stage in stages:
            applied = self._observed_value(resource, "status", "lastAppliedRevision")
            if current and applied != current:
                message = self.observed[resource].ready.message or "applying"
                return Condition(
                    SOURCE_SYNCED,
                    "False",
                    PROGRESSING,
                    f"Kustomization {stage.name}: {message}; the source is at {current}",
                )
        return summary

    def _backup(self) -> None:
        backup = self.spec.backup
        settings = self.target.settings.backup
        location = self._backup_location()
        if backup is None or settings is None or location is None:
            self.conditions.append(
                Condition(BACKUPS_READY, "True", NOT_CONFIGURED, "spec.backup is not set")
            )
            return
        names = self.target.names
        bucket, region, aws = location.bucket, location.region, location.aws
        ttl = backup.ttl or settings.defaults.ttl
        if backup.bucket.name is None:
            self.desired.update(
                storage.bucket_objects(
                    self.target, bucket, region, ttl, retain=backup.bucket.retain_on_delete
                )
            )
        self.desired.update(iam.role_objects(self.target, bucket, aws))
        # The ARN, or the one the schedule already carries while the role flickers.
        role_arn = _first(
            self._observed_value(BACKUP_ROLE, "status", "atProvider", "arn"),
            self._observed_value(BACKUP_SCHEDULE, "spec", "storage", "roleArn"),
        )
        # The schedule backs up the Instance: not before it is composed (a restore may
        # hold it back), and never withdrawn once observed.
        if role_arn and (INSTANCE in self.desired or BACKUP_SCHEDULE in self.observed):
            self.desired[BACKUP_SCHEDULE] = schedule.backup_schedule(
                self.target,
                backup.schedule or settings.defaults.schedule,
                ttl,
                backup.suspend,
                schedule.Storage(
                    bucket,
                    region,
                    names.backup_prefix,
                    role_arn,
                    iam.assume_role_with(settings.trust),
                ),
                final_backup=backup.final_backup,
                excluded_resources=backup.excluded_resources,
            )
        else:
            self.awaiting = True
        parts = tuple(name for name in self.desired if name.startswith("backup-"))
        status: dict[str, Any] = {
            "ready": all(self._ready(name) for name in parts) and BACKUP_SCHEDULE in parts,
            "bucket": bucket,
            "prefix": names.backup_prefix,
        }
        for key, value in (
            ("roleArn", role_arn),
            ("lastBackup", self._observed_value(BACKUP_SCHEDULE, "status", "lastBackup")),
            (
                "lastSuccessfulBackup",
                self._observed_value(BACKUP_SCHEDULE, "status", "lastSuccessfulBackup"),
            ),
        ):
            if value:
                status[key] = value
        self.status["backup"] = status
        failed = self._first_failure(BACKUPS_READY, parts)
        if failed is not None:
            # A part that failed says more than a wait for the ARN or the Instance: a
            # role refused by AWS never reports its ARN.
            self.conditions.append(failed)
        elif not role_arn:
            self.conditions.append(
                Condition(
                    BACKUPS_READY,
                    "False",
                    WAITING_FOR_ROLE_ARN,
                    f"the BackupSchedule is composed once Role {names.iam_object} reports its ARN",
                )
            )
        elif BACKUP_SCHEDULE not in self.desired:
            self.awaiting = True
            self.conditions.append(
                Condition(
                    BACKUPS_READY,
                    "False",
                    WAITING_FOR_INSTANCE,
                    "the BackupSchedule is composed once the Instance is",
                )
            )
        else:
            self.conditions.append(self._backups_ready(parts))

    def _backups_ready(self, parts: tuple[str, ...]) -> Condition:
        """The summary of the backup parts; when True, in the words of the newest Backup."""
        summary = self._summary(BACKUPS_READY, parts)
        seen = self.observed.get(BACKUP_SCHEDULE)
        last = condition(seen.body, LAST_BACKUP) if seen is not None else None
        if summary.true and last is not None and last.true:
            return Condition(BACKUPS_READY, "True", last.reason, _bounded(last.message))
        return summary

    def _backup_location(self) -> BackupLocation | None:
        """Where the backups go; None without spec.backup."""
        backup = self.spec.backup
        settings = self.target.settings.backup
        if backup is None or settings is None:
            return None
        names = self.target.names
        aws = AwsNames.kept(
            settings.bucket_name_prefix,
            names.namespace,
            names.composite,
            ObservedAwsNames(
                role=self._external_name(BACKUP_ROLE),
                policy=self._external_name(BACKUP_POLICY),
                bucket=self._external_name(BACKUP_BUCKET),
            ),
        )
        return BackupLocation(
            bucket=backup.bucket.name or aws.bucket,
            region=backup.bucket.region or self.target.settings.aws.region,
            aws=aws,
        )

    def _usages(self) -> None:
        kustomizations = tuple((INSTANCE, resource) for resource in self.kustomizations)
        for used, user in (*kustomizations, *DEPENDENCIES):
            if used in self.desired and user in self.desired:
                self.desired[f"usage-{used}-by-{user}"] = usage.usage(
                    self.target, used, self.desired[used], user, self.desired[user]
                )

    def _summary(self, type_: str, parts: tuple[str, ...]) -> Condition:
        """True when every part is ready and none failed.

        Else the first part that failed, in its own words; else the first part
        not ready yet, with its own reason.
        """
        failed = self._first_failure(type_, parts)
        if failed is not None:
            return failed
        for name in parts:
            if not self._ready(name):
                return _waiting(
                    type_, "Creating", self.observed.get(name), f"{name} is being created"
                )
        last = self.observed[parts[-1]].ready
        return Condition(type_, "True", last.reason or "Available", last.message)

    def _first_failure(self, type_: str, parts: tuple[str, ...]) -> Condition | None:
        """``type_`` False with the first failure of ``parts``, in that object's words; or None.

        A failure is what the object says with its own conditions
        (``Resource.failure``): Synced=False counts as much as Ready=False, so a
        missing provider config, a version the Space refuses or AWS AccessDenied
        reaches the composite as the object says it, not as "not ready yet".
        """
        for name in parts:
            seen = self.observed.get(name)
            failed = seen.failure() if seen is not None else None
            if seen is not None and failed is not None:
                return _told(type_, seen, failed)
        return None

    def _observed_value(self, name: str, *path: str) -> Any:
        seen = self.observed.get(name)
        return seen.get(*path) if seen is not None else None

    def _external_name(self, name: str) -> str | None:
        value = self._observed_value(name, "metadata", "annotations", EXTERNAL_NAME)
        return str(value) if value else None

    def _connection_details(self) -> dict[str, bytes]:
        """The legacy composite passes the kubeconfig on to its claim's secret."""
        seen = self.observed.get(INSTANCE)
        if not self.target.legacy or seen is None:
            return {}
        kubeconfig = seen.connection_details.get(instance.KUBECONFIG_KEY)
        return {instance.KUBECONFIG_KEY: kubeconfig} if kubeconfig else {}


def _waiting(type_: str, reason: str, seen: Resource | None, unseen: str) -> Condition:
    """A False condition that passes on the observed object's own Ready reason and message."""
    if seen is None:
        return Condition(type_, "False", reason, unseen)
    ready = seen.ready
    detail = ready.message or ready.reason or "not ready yet"
    return Condition(type_, "False", ready.reason or reason, _about(seen, detail))


def _told(type_: str, seen: Resource, failed: Condition) -> Condition:
    """``type_`` False with the reason and message of the object's condition ``failed``."""
    reason = failed.reason or failed.type
    return Condition(type_, "False", reason, _about(seen, failed.message or reason))


def _about(seen: Resource, detail: str) -> str:
    """``<kind> <name>: <detail>``, ``_bounded``."""
    kind = seen.get("kind") or "object"
    name = seen.get("metadata", "name") or ""
    return _bounded(f"{kind} {name}: {detail}")


def _bounded(text: str) -> str:
    """``text`` on one line, at most ``MESSAGE_LIMIT`` characters."""
    text = " ".join(text.split())
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[: MESSAGE_LIMIT - 1].rstrip() + "…"


def _first(*values: Any) -> Any:
    return next((value for value in values if value), None)
