"""Developer tools run as modules (``python -m sardeenz.tools.<name>``), not at serve time."""
