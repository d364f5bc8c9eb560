"""Management policies, against crossplane-runtime's ManagementPoliciesResolver.

The expected values are written out by hand from crossplane-runtime v2.2.1's
``pkg/reconciler/managed/policies.go`` (with the management policies feature
enabled), not computed from our code:

- ``IsPaused``: the set is empty.
- ``ShouldCreate``/``ShouldUpdate``/``ShouldLateInitialize``/``ShouldDelete``:
  the set has that action or ``*``.
- ``ShouldOnlyObserve``: the set is exactly ``{Observe}``.
- ``Validate``: the set equals one of ``defaultSupportedManagementPolicies()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.managed import policy
from provider.managed.policy import Policies, UnsupportedPolicyError


@dataclass
class PolicyCase:
    reason: str
    policies: tuple[str, ...] | None
    paused: bool
    should_create: bool
    should_update: bool
    should_late_initialize: bool
    should_only_observe: bool
    should_delete: bool


SUPPORTED_CASES = [
    PolicyCase(
        reason="absent policies mean the default of all actions",
        policies=None,
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="the wildcard allows every action",
        policies=("*",),
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="every action spelled out is the same as the wildcard",
        policies=("Observe", "Create", "Update", "LateInitialize", "Delete"),
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="observe alone only observes",
        policies=("Observe",),
        paused=False,
        should_create=False,
        should_update=False,
        should_late_initialize=False,
        should_only_observe=True,
        should_delete=False,
    ),
    PolicyCase(
        reason="no actions at all pause reconciliation",
        policies=(),
        paused=True,
        should_create=False,
        should_update=False,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="without late initialize the spec is never filled in",
        policies=("Observe", "Create", "Update", "Delete"),
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="without delete the external resource is orphaned",
        policies=("Observe", "Create", "Update", "LateInitialize"),
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="without delete and late initialize only observe create and update remain",
        policies=("Observe", "Create", "Update"),
        paused=False,
        should_create=True,
        should_update=True,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="without update drift is never corrected",
        policies=("Observe", "Create", "Delete", "LateInitialize"),
        paused=False,
        should_create=True,
        should_update=False,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="without update and delete only observe create and late initialize remain",
        policies=("Observe", "Create", "LateInitialize"),
        paused=False,
        should_create=True,
        should_update=False,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="without update and late initialize only observe create and delete remain",
        policies=("Observe", "Create", "Delete"),
        paused=False,
        should_create=True,
        should_update=False,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="observe and create only create what is missing",
        policies=("Observe", "Create"),
        paused=False,
        should_create=True,
        should_update=False,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="observe and delete observe but delete with the managed resource",
        policies=("Observe", "Delete"),
        paused=False,
        should_create=False,
        should_update=False,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=True,
    ),
    PolicyCase(
        reason="observe and update only patch an existing resource",
        policies=("Observe", "Update"),
        paused=False,
        should_create=False,
        should_update=True,
        should_late_initialize=False,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="observe and late initialize import an existing resource",
        policies=("Observe", "LateInitialize"),
        paused=False,
        should_create=False,
        should_update=False,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=False,
    ),
    PolicyCase(
        reason="observe update and late initialize manage an existing resource's fields",
        policies=("Observe", "Update", "LateInitialize"),
        paused=False,
        should_create=False,
        should_update=True,
        should_late_initialize=True,
        should_only_observe=False,
        should_delete=False,
    ),
]


@pytest.mark.parametrize("case", SUPPORTED_CASES, ids=lambda case: case.reason)
def test_a_supported_policy_is_accepted_and_allows_what_crossplane_runtime_allows(
    case: PolicyCase,
) -> None:
    resolved = Policies.of(case.policies)

    resolved.validate()
    assert {
        "paused": resolved.paused,
        "should_create": resolved.should_create,
        "should_update": resolved.should_update,
        "should_late_initialize": resolved.should_late_initialize,
        "should_only_observe": resolved.should_only_observe,
        "should_delete": resolved.should_delete,
    } == {
        "paused": case.paused,
        "should_create": case.should_create,
        "should_update": case.should_update,
        "should_late_initialize": case.should_late_initialize,
        "should_only_observe": case.should_only_observe,
        "should_delete": case.should_delete,
    }


@pytest.mark.parametrize(
    "case",
    [case for case in SUPPORTED_CASES if case.policies is not None],
    ids=lambda case: case.reason,
)
def test_the_order_and_repetition_of_policies_do_not_change_what_they_allow(
    case: PolicyCase,
) -> None:
    assert case.policies is not None
    shuffled = Policies.of([*reversed(case.policies), *case.policies])

    assert shuffled == Policies.of(case.policies)
    shuffled.validate()


def test_the_table_covers_exactly_the_fifteen_combinations_crossplane_runtime_supports() -> None:
    in_table = {frozenset(case.policies) for case in SUPPORTED_CASES if case.policies is not None}

    assert len(policy.SUPPORTED) == 15
    assert set(policy.SUPPORTED) == in_table


def test_absent_policies_resolve_to_the_wildcard() -> None:
    assert Policies.of(None) == Policies(frozenset({"*"}))


@dataclass
class UnsupportedCase:
    reason: str
    policies: tuple[str, ...]


UNSUPPORTED_CASES = [
    UnsupportedCase("create alone cannot create without observing", ("Create",)),
    UnsupportedCase("delete alone cannot delete without observing", ("Delete",)),
    UnsupportedCase("update alone cannot update without observing", ("Update",)),
    UnsupportedCase("late initialize alone is not a supported set", ("LateInitialize",)),
    UnsupportedCase(
        "every action plus the wildcard is not the same set as either",
        ("Observe", "Create", "Update", "Delete", "LateInitialize", "*"),
    ),
    UnsupportedCase("the wildcard with observe is not the wildcard", ("*", "Observe")),
    UnsupportedCase("create and delete without observe is refused", ("Create", "Delete")),
    UnsupportedCase(
        "observe update and delete is not a supported set", ("Observe", "Update", "Delete")
    ),
    UnsupportedCase(
        "observe create update delete without late initialize but with an unknown action",
        ("Observe", "Create", "Update", "Delete", "Replace"),
    ),
    UnsupportedCase("actions are case sensitive", ("observe",)),
]


@pytest.mark.parametrize("case", UNSUPPORTED_CASES, ids=lambda case: case.reason)
def test_an_unsupported_policy_is_refused_with_a_message_naming_the_field_and_its_value(
    case: UnsupportedCase,
) -> None:
    with pytest.raises(UnsupportedPolicyError) as raised:
        Policies.of(case.policies).validate()

    message = str(raised.value)
    assert "spec.managementPolicies" in message
    assert "not supported" in message
    # crossplane-runtime prints the set as Go does: [Create Observe].
    shown = " ".join(sorted(set(case.policies)))
    assert f"value([{shown}])" in message, message


def test_an_unsupported_policy_error_is_a_value_error() -> None:
    assert issubclass(UnsupportedPolicyError, ValueError)


@dataclass
class DeletionCase:
    reason: str
    policies: tuple[str, ...] | None
    deletion_policy: str | None
    should_delete: bool


# crossplane-runtime v1's ManagementPoliciesResolver.ShouldDelete, for cluster-scoped
# (legacy) resources; a namespaced resource has no deletion policy (None).
DELETION_CASES = [
    DeletionCase("a namespaced resource deletes with the default policies", None, None, True),
    DeletionCase(
        "a namespaced resource without Delete orphans", ("Observe", "Create"), None, False
    ),
    DeletionCase("a legacy resource with both defaults deletes", None, "Delete", True),
    DeletionCase("a legacy resource with deletionPolicy Orphan orphans", None, "Orphan", False),
    DeletionCase(
        "a legacy resource with Orphan and the explicit wildcard orphans", ("*",), "Orphan", False
    ),
    DeletionCase(
        "a legacy resource whose non-default policies name Delete deletes despite Orphan",
        ("Observe", "Create", "Delete"),
        "Orphan",
        True,
    ),
    DeletionCase(
        "a legacy resource whose policies lack Delete orphans despite deletionPolicy Delete",
        ("Observe", "Create", "Update"),
        "Delete",
        False,
    ),
]


@pytest.mark.parametrize("case", DELETION_CASES, ids=lambda case: case.reason)
def test_deletion_weighs_the_deletion_policy_only_for_legacy_resources(case: DeletionCase) -> None:
    assert Policies.of(case.policies, case.deletion_policy).should_delete is case.should_delete
