"""The exit codes of ``sardeenz serve``: one table, documented in docs/operations.md.

A supervisor (systemd's ``RestartPreventExitStatus=``, a container's restart policy, a
script) decides on them whether to retry, so each means one kind of remedy: a refusal
before start-up prints one line naming the setting, path or holder and exits with the
code of its kind; only an unexpected failure exits 1 with a traceback.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EXIT_ADDRESS_IN_USE",
    "EXIT_CONFIG",
    "EXIT_DATA_DIR_IN_USE",
    "EXIT_STARTUP_FAILED",
    "EXIT_STORAGE",
]

EXIT_STARTUP_FAILED: Final = 1
"""An unexpected failure while starting (a bug or an unforeseen environment): logged with
its traceback. Every foreseen refusal has a code of its own below."""
EXIT_CONFIG: Final = 2
"""A setting cannot be used (one line naming it), or a non-loopback bind without auth."""
EXIT_STORAGE: Final = 3
"""The data dir, the runtime dir or the database cannot be used, or is damaged."""
EXIT_DATA_DIR_IN_USE: Final = 4
"""Another ``sardeenz serve`` runs on this data dir (the line names its PID)."""
EXIT_ADDRESS_IN_USE: Final = 5
"""The listening address cannot be bound: the port is taken, or binding it is not allowed."""
