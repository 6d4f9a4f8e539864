"""Who manages an instance (cluster/stewards.py): the pure rule."""

from __future__ import annotations

from sardeenz.cluster.stewards import steward_of
from sardeenz.domain import ManagedBy


def test_applied_preset_declaring_the_name_manages_it() -> None:
    got = steward_of("chat", "prod", {"chat", "embed"}, set())
    assert got == ManagedBy(kind="preset", name="prod")


def test_catalog_entry_of_the_name_manages_it() -> None:
    assert steward_of("chat", None, set(), {"chat"}) == ManagedBy(kind="catalog", name="chat")


def test_preset_wins_over_the_catalog() -> None:
    got = steward_of("chat", "prod", {"chat"}, {"chat"})
    assert got == ManagedBy(kind="preset", name="prod")


def test_names_of_a_preset_that_is_not_applied_do_not_count() -> None:
    assert steward_of("chat", None, {"chat"}, set()) is None


def test_a_hand_loaded_name_is_managed_by_nobody() -> None:
    assert steward_of("mine", "prod", {"chat"}, {"chat"}) is None


def test_field_is_camel_case_in_json() -> None:
    from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance

    inst = ModelInstance(
        id="i",
        model_path="m",
        served_model_name="chat",
        display_name="chat",
        engine=EngineKind.SIM,
        status=InstanceStatus.ACTIVE,
        port=1,
        managed_by=ManagedBy(kind="catalog", name="chat"),
    )
    assert inst.model_dump(by_alias=True, mode="json")["managedBy"] == {
        "kind": "catalog",
        "name": "chat",
    }
