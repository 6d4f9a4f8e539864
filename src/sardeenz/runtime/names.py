"""The checks a load's model path and names pass before anything is admitted or spawned.

``modelPath`` and ``servedModelName`` become argv entries of the engine (``--model X``,
``--served-model-name X``) and all three names reach logs and dashboards. Refused up front,
with 400 and a code per field, rather than failing later inside the engine:

* control characters (``safetext.UNSAFE_CHARS``): line breaks, ANSI escapes and the Unicode
  line separators forge log lines and rewrite terminals; no path or name needs one;
* a model path or served name starting with ``-``: vLLM's argparse reads ``--port=9999``
  or ``-h`` after ``--model`` as a flag of its own, not as the value (``-h`` even makes
  the engine print its help and exit).
"""

from __future__ import annotations

from sardeenz.errors import InvalidRequest
from sardeenz.safetext import first_unsafe

__all__ = ["check_names"]


def check_names(model_path: str, served_model_name: str | None, display_name: str | None) -> None:
    """Raise ``InvalidRequest`` (400) for a name that is unsafe or would be read as a flag.

    ``model_path`` is the stripped path the engine gets; codes: ``invalid_model_path``,
    ``invalid_served_model_name``, ``invalid_display_name``.
    """
    fields = (
        ("modelPath", model_path, "invalid_model_path", True),
        ("servedModelName", served_model_name, "invalid_served_model_name", True),
        ("displayName", display_name, "invalid_display_name", False),
    )
    for field, value, code, is_argv in fields:
        if value is None:
            continue
        bad = first_unsafe(value)
        if bad is not None:
            raise InvalidRequest(f"{field} contains a control character ({bad})", code=code)
        if is_argv and value.startswith("-"):
            raise InvalidRequest(
                f"{field} must not start with '-': the engine would read it as a flag",
                code=code,
            )
