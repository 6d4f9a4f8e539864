"""A stand-in ``kvctl`` that behaves like kvcached 0.1.5's, on a folder instead of /dev/shm.

kvctl needs CUDA, so tests run this instead: the same output text, the same
exit 0 when a delete or limit fails, segment files of the same 24-byte layout.
Every invocation is appended to a log file the test reads back.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

FAKE_KVCTL = f"""#!{sys.executable} -S
import json, os, struct, sys, time

shm = os.environ["FAKE_SHM_DIR"]
mode = os.environ.get("FAKE_KVCTL_MODE", "")
args = sys.argv[1:]
with open(os.environ["FAKE_KVCTL_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if mode == "hang":
    time.sleep(30)
if mode == "crash":
    print("Traceback (most recent call last): ...", file=sys.stderr)
    sys.exit(1)
cmd = args[0] if args else "shell"
if cmd == "list":
    res = []
    for name in sorted(os.listdir(shm)):
        path = os.path.join(shm, name)
        if os.path.getsize(path) != 24:
            continue
        with open(path, "rb") as f:
            total, used, _ = struct.unpack("<qqq", f.read(24))
        if total > 0:
            res.append({{"ipc": name, "limit_bytes": total, "used_bytes": used}})
    if "--json" in args and mode != "text":
        print(json.dumps(res, indent=2))
    elif not res:
        print("No active KVCached segments found.")
elif cmd == "delete":
    path = os.path.join(shm, args[1])
    if os.path.exists(path):
        os.unlink(path)
        print(f"Deleted IPC '{{args[1]}}'.")
    else:
        prefix = "Error: " if mode == "error-prefix" else ""
        print(f"{{prefix}}IPC '{{args[1]}}' not found.", file=sys.stderr)
    sys.exit(0)  # kvcached 0.1.5 exits 0 even when the delete failed
elif cmd == "limit":
    path = os.path.join(shm, args[1])
    if not os.path.exists(path):
        print(f"Error: IPC '{{args[1]}}' not found.", file=sys.stderr)
        sys.exit(0)
    with open(path, "r+b") as f:
        _, used, prealloc = struct.unpack("<qqq", f.read(24))
        f.seek(0)
        f.write(struct.pack("<qqq", int(args[2]), used, prealloc))
    print(f"Updated kv cache limit for {{args[1]}} to ... ({{args[2]}} bytes)")
else:
    print("Entering kvcached shell.")
"""


def fake_kvctl_env(bindir: Path, shm: Path, calls: Path) -> dict[str, str]:
    """Write the stand-in to ``bindir/kvctl``; the environment that puts it on PATH."""
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / "kvctl"
    exe.write_text(FAKE_KVCTL)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_SHM_DIR": str(shm),
        "FAKE_KVCTL_LOG": str(calls),
    }
