"""The idle policy: sleep then unload an idle model; never a busy, pinned or fresh one."""

from __future__ import annotations

from dataclasses import replace

from sardeenz.catalog.idle import IdleAction, IdleFacts, IdleRules, decide

RULES = IdleRules(
    sleep_level=1,
    idle_sleep_seconds=10,
    idle_unload_seconds=60,
    pinned=False,
    min_residency_seconds=5,
)
IDLE = IdleFacts(status="active", in_flight=0, idle_for=0, resident_for=100, sleep_capable=True)


def test_sleep_after_the_sleep_ttl_then_unload_after_the_unload_ttl() -> None:
    assert decide(replace(IDLE, idle_for=9.9), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=10), RULES) is IdleAction.SLEEP
    assert decide(replace(IDLE, status="sleeping", idle_for=30), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, status="sleeping", idle_for=60), RULES) is IdleAction.UNLOAD
    assert decide(replace(IDLE, idle_for=61), RULES) is IdleAction.UNLOAD


def test_never_while_a_request_is_in_flight() -> None:
    assert decide(replace(IDLE, idle_for=1000, in_flight=1), RULES) is IdleAction.KEEP


def test_never_a_pinned_model() -> None:
    assert decide(replace(IDLE, idle_for=1000), replace(RULES, pinned=True)) is IdleAction.KEEP


def test_minimum_residency_after_a_load() -> None:
    assert decide(replace(IDLE, idle_for=1000, resident_for=4), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=1000, resident_for=5), RULES) is IdleAction.UNLOAD


def test_no_sleep_without_sleep_mode_or_level_but_unload_still_applies() -> None:
    assert decide(replace(IDLE, idle_for=20, sleep_capable=False), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=20), replace(RULES, sleep_level=0)) is IdleAction.KEEP
    no_sleep = replace(IDLE, idle_for=60, sleep_capable=False)
    assert decide(no_sleep, RULES) is IdleAction.UNLOAD


def test_starting_stopping_and_failed_instances_are_left_alone() -> None:
    for status in ("starting", "stopping", "failed"):
        assert decide(replace(IDLE, status=status, idle_for=1000), RULES) is IdleAction.KEEP


def test_no_ttl_keeps_the_model() -> None:
    rules = replace(RULES, idle_sleep_seconds=None, idle_unload_seconds=None)
    assert decide(replace(IDLE, idle_for=10**6), rules) is IdleAction.KEEP
