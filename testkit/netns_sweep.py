"""What an interrupted run left of its network fabrics, found and removed.

A ``testkit.netns.Fabric`` deletes its namespaces, links and nftables tables in
``close()``; a run killed before that (Ctrl-C on ``make pytest``, a SIGKILLed soak)
leaves them behind, with the pods it started still running inside the namespaces. The
next fabric that opens sweeps them (``sweep_stale``), so one interrupted run costs
nothing to the next.

Which fabric is stale is decided by its lock, not by guessing: every fabric holds the
lock file of its subnet ``N`` (``lock_path``) from before it creates anything until it
has deleted everything, and the kernel releases the lock when its holder dies. Names
carry ``N`` (the first two hex digits of the fabric's tag), so whatever is named after a
``N`` whose lock can be taken belongs to no live fabric, here or in a run beside this
one; the sweep holds that lock while it deletes, so no fabric reuses ``N`` meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

LINK = re.compile(r"^sz(?:L|R|M|cL|cR|d|m)(?P<tag>[0-9a-f]{4})\d*$")
NAMESPACE = re.compile(r"^sz(?P<tag>[0-9a-f]{4})p\d+$")
TABLE = re.compile(r"^sz(?:host|api|loss)(?P<tag>[0-9a-f]{4})\d*$")


def lock_path(net: int) -> Path:
    """The lock file a fabric on subnet ``net`` holds for its whole life."""
    return Path(tempfile.gettempdir()) / f"sardeenz-fabric-{net}.lock"


def try_lock(net: int) -> int | None:
    """``net``'s lock taken, as an open descriptor (closing it frees the lock), or None
    when another fabric holds it."""
    fd = os.open(lock_path(net), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def held(net: int) -> Iterator[bool]:
    """Hold ``net``'s lock for the block if no one else does; yields whether it could."""
    fd = try_lock(net)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def _lines(*cmd: str) -> list[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    return done.stdout.splitlines() if done.returncode == 0 else []


def _quiet(*cmd: str) -> None:
    subprocess.run(cmd, capture_output=True, timeout=10)


def _leftovers() -> dict[str, dict[str, list[str]]]:
    """Fabric names on this machine by tag: {"namespaces"|"links"|"tables": names}."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for line in _lines("ip", "netns", "list"):
        name = line.split()[0] if line.strip() else ""
        if m := NAMESPACE.match(name):
            found[m["tag"]]["namespaces"].append(name)
    for line in _lines("ip", "-o", "link", "show"):
        # "7: szL0a1b: <BROADCAST,...>" or "9: szd0a1b0@if8: ..."
        parts = line.split(":", 2)
        name = parts[1].strip().split("@", 1)[0] if len(parts) > 2 else ""
        if m := LINK.match(name):
            found[m["tag"]]["links"].append(name)
    for line in _lines("nft", "list", "tables"):
        words = line.split()  # "table netdev szapi0a1b2"
        if len(words) == 3 and (m := TABLE.match(words[2])):
            found[m["tag"]]["tables"].append(f"{words[1]} {words[2]}")
    return found


def sweep_stale() -> list[str]:
    """Remove every fabric no live process holds (see the module doc); what was removed."""
    removed: list[str] = []
    for tag, kinds in sorted(_leftovers().items()):
        with held(int(tag[:2], 16)) as stale:
            if not stale:
                continue
            for ns in kinds["namespaces"]:
                for pid in _lines("ip", "netns", "pids", ns):
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                _quiet("ip", "netns", "del", ns)
                removed.append(f"namespace {ns}")
            for table in kinds["tables"]:
                _quiet("nft", "delete", "table", *table.split())
                removed.append(f"nft table {table}")
            for link in kinds["links"]:
                # A namespace's deletion takes its veth pairs with it: gone is fine.
                _quiet("ip", "link", "del", link)
                removed.append(f"link {link}")
    return removed


if __name__ == "__main__":  # `python -m testkit.netns_sweep`, after a run was interrupted
    for what in sweep_stale():
        print(f"removed {what}")
