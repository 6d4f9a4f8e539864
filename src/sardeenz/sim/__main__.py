"""``python -m sardeenz.sim``: how the controller's SimAdapter launches the simulated engine."""

from __future__ import annotations

from sardeenz.sim.server import main

if __name__ == "__main__":
    raise SystemExit(main())
