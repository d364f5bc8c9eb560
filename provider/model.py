"""Pydantic models of the kinds the provider reads, and the API resources they live at.

Each model reads only the fields we act on and ignores the rest, so a newer
CRD never breaks an older provider; a field we act on that breaks its rule
is a clear error naming it.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from provider.kube import Resource

GROUP = "controlplane.spaces.upbound.io"
VERSION = "v1alpha1"
INSTANCES = Resource(GROUP, VERSION, "instances", "Instance")
PROVIDER_CONFIGS = Resource(GROUP, VERSION, "providerconfigs", "ProviderConfig")
CLUSTER_PROVIDER_CONFIGS = Resource(
    GROUP, VERSION, "clusterproviderconfigs", "ClusterProviderConfig", namespaced=False
)
PROVIDER_CONFIG_USAGES = Resource(GROUP, VERSION, "providerconfigusages", "ProviderConfigUsage")
CLUSTER_PROVIDER_CONFIG_USAGES = Resource(
    GROUP,
    VERSION,
    "clusterproviderconfigusages",
    "ClusterProviderConfigUsage",
    namespaced=False,
)
CONTROL_PLANES = Resource("spaces.upbound.io", "v1beta1", "controlplanes", "ControlPlane")

CONNECTION_SECRET_TYPE = "connection.crossplane.io/v1alpha1"  # noqa: S105 (a type name)
KUBECONFIG_KEY = "kubeconfig"
# On the connection secrets the provider writes, so its cache of Secrets holds only those.
CONNECTION_SECRET_LABEL = "controlplane.spaces.upbound.io/connection-secret"  # noqa: S105 (a label)
CONNECTION_SECRET_SELECTOR = f"{CONNECTION_SECRET_LABEL}=true"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class AutoUpgrade(_Model):
    """Crossplane's upgrade channel."""

    channel: Literal["None", "Patch", "Stable", "Rapid"] = "Stable"


class CrossplaneSpec(_Model):
    """The Crossplane of a control plane."""

    version: str | None = None
    auto_upgrade: AutoUpgrade = AutoUpgrade()


class BackupRef(_Model):
    """A Backup in the Instance's namespace."""

    name: str


class Restoration(_Model):
    """Where an Instance is first restored from."""

    backup_ref: BackupRef


class InstanceParameters(_Model):
    """``spec.forProvider`` of an Instance."""

    crossplane: CrossplaneSpec = CrossplaneSpec()
    class_: str | None = Field(default=None, alias="class")
    initial_restoration_from: Restoration | None = None


class RestoreStatus(_Model):
    """``status.atProvider.restore`` of an Instance: where its restore stands.

    The provider writes it; it reads it back to resume an interrupted restore.
    """

    backup_name: str = ""
    phase: Literal["InProgress", "Completed", "Failed"] | None = None
    step: str = ""
    applied: int = Field(default=0, ge=0)
    total: int = Field(default=0, ge=0)
    started_at: str = ""
    message: str = ""
    completed_at: str = ""


class ProviderConfigRef(_Model):
    """Which provider config an Instance uses."""

    kind: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"
    name: str = "default"


class SecretReference(_Model):
    """A secret by name, in the resource's own namespace."""

    name: str


class InstanceSpec(_Model):
    """``spec`` of an Instance."""

    for_provider: InstanceParameters = InstanceParameters()
    provider_config_ref: ProviderConfigRef = ProviderConfigRef()
    write_connection_secret_to_ref: SecretReference | None = None


class SecretKeySelector(_Model):
    """A key of a secret."""

    namespace: str | None = None
    name: str
    key: str = KUBECONFIG_KEY


UPBOUND_TOKEN_ENDPOINT = "https://auth.upbound.io"  # noqa: S105 (a URL)


class UpboundSettings(_Model):
    """Upbound Cloud: the organisation, the Space and where tokens are exchanged.

    ``space_url`` is what ``up ctx`` names for a Cloud Space (its ingress,
    ``https://<space>.spaces.upbound.io``); ``token_endpoint`` is Upbound's auth
    service (``DefaultBaseURL`` of up-sdk-go ``service/auth``). A
    ``certificate_authority_data`` (base64 PEM) is trusted for both instead of
    the public CAs, for a Space and auth service with a private CA.
    """

    organization: str = Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9-]*$")
    space_url: str = Field(alias="spaceURL", pattern=r"^https://[^/?#@]+/?$")
    token_endpoint: str = Field(default=UPBOUND_TOKEN_ENDPOINT, pattern=r"^https://[^?#@]+$")
    certificate_authority_data: str | None = None


class Credentials(_Model):
    """Where a provider config's credentials come from.

    ``Secret``: ``secret_ref`` holds a kubeconfig of the Space. ``UpboundTokens``:
    ``secret_ref`` holds a robot's or user's token, exchanged for short-lived
    organisation-scoped tokens as ``upbound`` says.
    """

    source: Literal["Secret", "UpboundTokens"] = "Secret"
    secret_ref: SecretKeySelector
    upbound: UpboundSettings | None = None

    @model_validator(mode="after")
    def _upbound_with_tokens(self) -> Credentials:
        if self.source == "UpboundTokens" and self.upbound is None:
            msg = "upbound (organization, spaceURL) is required when source is UpboundTokens"
            raise ValueError(msg)
        return self


def credentials_namespace(kind: str, name: str, selector: SecretKeySelector, own: str) -> str:
    """The namespace of a provider config's kubeconfig Secret, for an Instance in ``own``.

    A ClusterProviderConfig's Secret is the operator's: its namespace is
    required and never taken from the Instance, or a team would have its own
    Secret read and trusted as the operator's Space kubeconfig. A namespaced
    ProviderConfig may only use a Secret of its own namespace (its default).

    Raises:
        InvalidError: naming the config and the field.
    """
    field = "spec.spaces.credentials.secretRef.namespace"
    if kind == "ClusterProviderConfig":
        if not selector.namespace:
            msg = (
                f"ClusterProviderConfig {name}: {field} is required: a cluster-scoped config "
                "never reads a Secret of the Instance's namespace"
            )
            raise InvalidError(msg)
        return selector.namespace
    found = selector.namespace or own
    if found != own:
        msg = f"ProviderConfig {name}: {field} must be {own!r}, its own namespace (got {found!r})"
        raise InvalidError(msg)
    return found


class SpacesSettings(_Model):
    """The Space: its kubeconfig, and the group (namespace) ControlPlanes are made in."""

    namespace: str = "default"
    credentials: Credentials


class ProviderConfigSpec(_Model):
    """``spec`` of a ProviderConfig or ClusterProviderConfig."""

    spaces: SpacesSettings


class SpaceStatus(_Model):
    """``status.space`` of a provider config: what the provider learned from its Space.

    ``ingress_host`` is the host (and port) the Space publishes for its control
    planes (``ingress-host`` of its ConfigMap ``upbound-system/ingress-public``),
    the default of the hosts a control plane's kubeconfig may name.
    """

    ingress_host: str = ""


class ProviderConfigStatus(_Model):
    """``status`` of a provider config: the fields the provider writes besides users."""

    space: SpaceStatus = SpaceStatus()


class SpaceCondition(_Model):
    """A condition of a Space's ControlPlane (crossplane-runtime's ``Condition``)."""

    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""


class ControlPlaneStatus(_Model):
    """``status`` of a ``spaces.upbound.io/v1beta1`` ControlPlane (up-sdk-go's type)."""

    conditions: list[SpaceCondition] = []
    message: str = ""
    control_plane_id: str = Field(default="", alias="controlPlaneID")
    # The spec generation the status answers (None: the Space did not say).
    observed_generation: int | None = None

    def condition(self, type_: str) -> SpaceCondition | None:
        """The condition of ``type_``, if the Space wrote one."""
        return next((c for c in self.conditions if c.type == type_), None)


class ControlPlaneAutoUpgrade(_Model):
    """A ControlPlane's channel; the Spaces CRD defaults it to Stable."""

    channel: str = "Stable"


class ControlPlaneCrossplane(_Model):
    """``spec.crossplane`` of a ControlPlane: what runs, and how it is upgraded."""

    version: str | None = None
    auto_upgrade: ControlPlaneAutoUpgrade = ControlPlaneAutoUpgrade()


class ControlPlaneSecretRef(_Model):
    """Where a Space writes a ControlPlane's kubeconfig."""

    name: str = ""
    namespace: str = ""


class ControlPlaneSpec(_Model):
    """``spec`` of a ControlPlane: the fields the provider sets or reads."""

    crossplane: ControlPlaneCrossplane = ControlPlaneCrossplane()
    class_: str | None = Field(default=None, alias="class")
    write_connection_secret_to_ref: ControlPlaneSecretRef | None = None


ModelT = TypeVar("ModelT", bound=BaseModel)


class InvalidError(ValueError):
    """An object breaks a rule; the message names the field."""


def parse(model: type[ModelT], data: object, where: str) -> ModelT:
    """Validate ``data`` as ``model``.

    Raises:
        InvalidError: one ``where.path: rule`` per problem.
    """
    try:
        return model.model_validate(data, by_alias=True)
    except ValidationError as error:
        problems = []
        for item in error.errors(include_url=False):
            path = ".".join([where, *(str(p) for p in item["loc"])])
            message = "is required" if item["type"] == "missing" else item["msg"]
            problems.append(f"{path}: {message}")
        raise InvalidError("; ".join(problems)) from None
