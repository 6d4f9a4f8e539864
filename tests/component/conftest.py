"""Fixtures of the component tier: one server per module for tests that only read or refuse.

A server start costs about a second of CPU on a shared machine; most checks
of validation (400/404/409/422 answers) and of read-only endpoints do not
need a server of their own. They take ``module_server`` (tests/conftest.py):
started with the default test settings at the module's first use, killed (with
every engine it started) after its last test; a test that loads models takes it
as ``reused_server``, which unloads everything after the test. A test that
restarts, crashes or counts what a server runs keeps its own
``server``/``server_factory``.
A module that needs other settings builds its shared server from
``module_server_factory`` the same way.

The helpers the component tests share (``load_active``, ``tree_pids``,
``wait_gone``, ...) live in the top-level ``testkit`` package, which the e2e
tests and the benchmarks use too.
"""

from __future__ import annotations
