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

from sardeenz.domain import LoadRequest
from sardeenz.errors import InvalidRequest
from sardeenz.safetext import first_unsafe

__all__ = ["check_load_names", "check_names", "name_problem"]


def name_problem(value: str, *, argv: bool) -> str | None:
    """Why ``value`` cannot be a model path or name, or None. ``argv``: the engine gets it
    as a flag's value, so it must not look like a flag itself."""
    bad = first_unsafe(value)
    if bad is not None:
        return f"contains a control character ({bad})"
    if argv and value.startswith("-"):
        return "must not start with '-': the engine would read it as a flag"
    return None


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
        problem = name_problem(value, argv=is_argv)
        if problem is not None:
            raise InvalidRequest(f"{field} {problem}", code=code)


def check_load_names(req: LoadRequest) -> str:
    """The names of a load request, checked as the load checks them: by the load itself,
    and by what stores a load for later (catalog entries, presets), so what is stored is
    what would load. Returns the stripped model path the engine gets."""
    model_path = req.model_path.strip()
    if not model_path:
        raise InvalidRequest("modelPath must not be empty", code="invalid_model_path")
    check_names(model_path, req.served_model_name, req.display_name)
    return model_path
