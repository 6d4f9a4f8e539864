"""Sardeenz: many LLM engines on shared GPUs behind one OpenAI-compatible endpoint."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sardeenz")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"
