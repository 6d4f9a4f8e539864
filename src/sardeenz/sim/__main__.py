"""``python -m sardeenz.sim``: how the controller's SimAdapter launches the simulated engine."""

from __future__ import annotations

if __name__ == "__main__":
    import gc

    # No garbage collection while the engine's modules load (as ``sardeenz serve``
    # does, cli/server.py): the import allocates tens of thousands of objects and next
    # to no garbage, yet the collector would walk them again and again (about 5 % of
    # an engine start's CPU). What was loaded lives as long as the process: frozen, so
    # later collections skip it too.
    gc.disable()
    from sardeenz.sim.server import main

    gc.freeze()
    gc.enable()
    raise SystemExit(main())
