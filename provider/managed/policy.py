"""Management policies, resolved exactly as crossplane-runtime's ManagementPoliciesResolver.

A namespaced (Crossplane v2) managed resource has only ``managementPolicies``.
A cluster-scoped (legacy) one also has ``deletionPolicy``, which the v1 resolver
weighs against them when deciding whether to delete the external resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OBSERVE = "Observe"
CREATE = "Create"
UPDATE = "Update"
DELETE = "Delete"
LATE_INITIALIZE = "LateInitialize"
ALL = "*"
DELETION_DELETE = "Delete"
DELETION_ORPHAN = "Orphan"

# The combinations crossplane-runtime supports; any other is refused.
SUPPORTED: tuple[frozenset[str], ...] = tuple(
    frozenset(policy)
    for policy in (
        {ALL},
        {OBSERVE, CREATE, UPDATE, LATE_INITIALIZE, DELETE},
        {OBSERVE},
        set(),
        {OBSERVE, CREATE, UPDATE, DELETE},
        {OBSERVE, CREATE, UPDATE, LATE_INITIALIZE},
        {OBSERVE, CREATE, UPDATE},
        {OBSERVE, CREATE, DELETE, LATE_INITIALIZE},
        {OBSERVE, CREATE, LATE_INITIALIZE},
        {OBSERVE, CREATE, DELETE},
        {OBSERVE, CREATE},
        {OBSERVE, DELETE},
        {OBSERVE, UPDATE},
        {OBSERVE, LATE_INITIALIZE},
        {OBSERVE, UPDATE, LATE_INITIALIZE},
    )
)


class UnsupportedPolicyError(ValueError):
    """A combination of management policies crossplane-runtime does not support."""


@dataclass(frozen=True)
class Policies:
    """What the reconciler may do to the external resource."""

    actions: frozenset[str]
    # None for a namespaced resource, which has no deletion policy.
    deletion_policy: str | None = None

    @classmethod
    def of(cls, policies: Iterable[str] | None, deletion_policy: str | None = None) -> Policies:
        """Policies from ``spec.managementPolicies``; absent means ``["*"]``.

        Args:
            policies: ``spec.managementPolicies``.
            deletion_policy: A legacy resource's ``spec.deletionPolicy`` ("Delete"
                when unset); None for a namespaced resource.
        """
        actions = frozenset(policies) if policies is not None else frozenset({ALL})
        return cls(actions, deletion_policy)

    def validate(self) -> None:
        """Refuse a combination crossplane-runtime does not support.

        Raises:
            UnsupportedPolicyError: naming the field and the supported sets.
        """
        if self.actions not in SUPPORTED:
            shown = " ".join(sorted(self.actions))
            msg = (
                f"`spec.managementPolicies` is set to a value([{shown}]) which is not supported. "
                "Check docs for supported policies"
            )
            raise UnsupportedPolicyError(msg)

    def _allows(self, action: str) -> bool:
        return ALL in self.actions or action in self.actions

    @property
    def paused(self) -> bool:
        """An empty set of policies pauses reconciliation."""
        return not self.actions

    @property
    def should_create(self) -> bool:
        """Whether a missing external resource is created."""
        return self._allows(CREATE)

    @property
    def should_update(self) -> bool:
        """Whether drift is corrected."""
        return self._allows(UPDATE)

    @property
    def should_late_initialize(self) -> bool:
        """Whether unset spec fields are filled from the external resource."""
        return self._allows(LATE_INITIALIZE)

    @property
    def should_only_observe(self) -> bool:
        """Whether the resource is only observed."""
        return self.actions == frozenset({OBSERVE})

    @property
    def should_delete(self) -> bool:
        """Whether deleting the managed resource deletes the external one.

        For a legacy resource, as crossplane-runtime v1's resolver: delete when
        the deletion policy is Delete and the management policies allow it, or
        when non-default management policies name Delete; orphan otherwise.
        """
        if self.deletion_policy is None:
            return self._allows(DELETE)
        if self.deletion_policy == DELETION_DELETE and self._allows(DELETE):
            return True
        return self.actions != frozenset({ALL}) and DELETE in self.actions
