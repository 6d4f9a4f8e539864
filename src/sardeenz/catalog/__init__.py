"""On-demand models: the catalog (YAML + API), load on first request, idle lifecycle.

* ``validation``: one entry -> a checked ``CatalogEntry`` or an error naming the field;
* ``registry``: the merged catalog (YAML and API entries), persisted API entries;
* ``demand``: load on first request, the bounded per-model wait, single flight;
* ``idle``: the pure idle policy; ``reaper``: the one background loop applying it.
"""
