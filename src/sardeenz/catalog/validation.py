"""Checking a catalog entry: the same rules as a load request, nothing of its own.

An entry is accepted exactly when the load it stands for would be: its load fields
are checked by building that ``LoadRequest`` (field limits) and by the engine
adapter's argument check (``extraArgs`` tokens). What is only the catalog's
(aliases, sleep level, TTLs) is checked by ``CatalogEntry`` and here. Pure
functions: no I/O, no service state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from sardeenz.catalog.adapterfiles import AdapterProbe
from sardeenz.domain import EngineKind, LoadRequest
from sardeenz.engines import get_adapter
from sardeenz.engines.vllm import has_flag
from sardeenz.errors import InvalidRequest
from sardeenz.runtime.names import check_load_names, name_problem
from sardeenz.safetext import TEXT_WHITESPACE, first_unsafe
from sardeenz.store.records import CatalogEntry

MAX_NAME = 512

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""vLLM's ``--max-lora-rank`` choices."""
DEFAULT_LORA_RANK = 16
"""vLLM's default ``--max-lora-rank``."""
LORA_FLAGS = ("--enable-lora", "--max-loras", "--max-lora-rank")
"""The engine flags ``loraSlots``/``maxLoraRank`` set (so extraArgs may not)."""


class EntryInvalid(ValueError):
    """A catalog entry that cannot be used; the message names the entry and the field."""


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(entry)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def check_name(name: object) -> str:
    """A served model name usable as a catalog key (or an alias)."""
    if not isinstance(name, str) or not name.strip():
        raise EntryInvalid(f"catalog entry {name!r}: the name must be a non-empty string")
    if name != name.strip() or len(name) > MAX_NAME:
        raise EntryInvalid(
            f"catalog entry {name[:80]!r}: the name must have no surrounding spaces and "
            f"at most {MAX_NAME} characters"
        )
    problem = name_problem(name, argv=True)  # it is a served model name, as a load's
    if problem is not None:
        raise EntryInvalid(f"catalog entry {name[:80]!r}: the name {problem}")
    return name


@dataclass(frozen=True, slots=True)
class ExternalUrl:
    """Where an ``engine: external`` entry's server is: ``url`` taken apart."""

    host: str
    port: int
    prefix: str
    """Path before ``/v1`` (e.g. ``/openai`` for ``http://gw/openai/v1``), no trailing slash."""

    @property
    def base(self) -> str:
        """``http://host:port`` + prefix: where ``/health`` and ``/v1/...`` are appended."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.prefix}"


def is_external(entry: CatalogEntry) -> bool:
    return entry.engine == "external"


def parse_external_url(url: str) -> ExternalUrl:
    """``http://host[:port][/prefix][/v1]`` -> its parts; ValueError says what is wrong.

    Only plain HTTP: the proxy's upstream client speaks HTTP/1.1 without TLS (what
    engines on a trusted network need); an https server goes behind a local TLS
    terminator (nginx, stunnel) whose http:// address is the entry's url.
    """
    parts = urlsplit(url.strip())
    if parts.scheme == "https":
        raise ValueError(
            "https:// is not supported yet (the proxy speaks plain HTTP to upstreams); "
            "put a local TLS-terminating proxy in front and use its http:// address"
        )
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"must be an http://host[:port] URL, got {url[:200]!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("must have no user, password, query or fragment (use apiKeyEnv/File)")
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError(f"invalid port in {url[:200]!r}") from None
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    if any(c in prefix for c in " \r\n\t"):
        raise ValueError("the path must not contain spaces or control characters")
    return ExternalUrl(parts.hostname, port, prefix)


_NOT_FOR_EXTERNAL = (
    ("lora_slots", "loraSlots"),
    ("max_lora_rank", "maxLoraRank"),
    ("extra_args", "extraArgs"),
    ("gpu_ids", "gpuIds"),
    ("gpu_memory_limit", "gpuMemoryLimit"),
    ("sleep_level", "sleepLevel"),
    ("idle_sleep_seconds", "idleSleepSeconds"),
    ("idle_unload_seconds", "idleUnloadSeconds"),
    ("preload", "preload"),
    ("warmup", "warmup"),
    ("warmup_prompt", "warmupPrompt"),
)


_EXTERNAL_ONLY = (("url", "url"), ("api_key_env", "apiKeyEnv"), ("api_key_file", "apiKeyFile"))


def _check_external(where: str, entry: CatalogEntry) -> None:
    if entry.url is None:
        raise EntryInvalid(f"{where}: url: engine external needs the server's url")
    try:
        parse_external_url(entry.url)
    except ValueError as exc:
        raise EntryInvalid(f"{where}: url: {exc}") from None
    if entry.api_key_env is not None and entry.api_key_file is not None:
        raise EntryInvalid(f"{where}: apiKeyEnv: give apiKeyEnv or apiKeyFile, not both")
    if entry.api_key_env is not None and not entry.api_key_env.strip():
        raise EntryInvalid(f"{where}: apiKeyEnv: must name an environment variable")
    if entry.api_key_file is not None and not entry.api_key_file.strip():
        raise EntryInvalid(f"{where}: apiKeyFile: must name a file")
    if not entry.model_path.strip() or len(entry.model_path) > MAX_NAME:
        raise EntryInvalid(f"{where}: modelPath: the server's model name (1-{MAX_NAME} chars)")
    problem = name_problem(entry.model_path, argv=True)
    if problem is not None:
        raise EntryInvalid(f"{where}: modelPath {problem}")
    defaults = CatalogEntry(model_path="x")
    for field, alias in _NOT_FOR_EXTERNAL:
        if getattr(entry, field) != getattr(defaults, field):
            raise EntryInvalid(f"{where}: {alias}: does not apply to engine external")
    if entry.tensor_parallel_size != 1:
        raise EntryInvalid(f"{where}: tensorParallelSize: does not apply to engine external")


_ADAPTER_OWN = frozenset({"adapter_of", "adapter_path", "aliases"})


def is_adapter(entry: CatalogEntry) -> bool:
    """A LoRA adapter entry: it runs inside an instance of its base, never on its own."""
    return entry.adapter_of is not None


def _check_adapter(where: str, entry: CatalogEntry) -> None:
    """The adapter's own fields; its base and rank are checked against the whole catalog."""
    if entry.adapter_of is None:
        raise EntryInvalid(f"{where}: adapterPath: needs adapterOf (the base entry's name)")
    try:
        check_name(entry.adapter_of)
    except EntryInvalid:
        raise EntryInvalid(f"{where}: adapterOf: {entry.adapter_of[:80]!r} is not a name") from None
    path = entry.adapter_path
    if path is None or not path.strip():
        raise EntryInvalid(f"{where}: adapterPath: an adapter needs the folder of its PEFT files")
    bad = first_unsafe(path)
    if bad is not None:
        raise EntryInvalid(f"{where}: adapterPath contains a control character ({bad})")
    defaults = CatalogEntry()
    for field, info in CatalogEntry.model_fields.items():
        if field not in _ADAPTER_OWN and getattr(entry, field) != getattr(defaults, field):
            alias = info.alias or field
            raise EntryInvalid(
                f"{where}: {alias}: does not apply to an adapter (it runs in its base's "
                "instances and follows the base's settings)"
            )


def lora_args(entry: CatalogEntry) -> list[str]:
    """The engine flags of a LoRA base (``loraSlots``): none for any other entry."""
    if entry.lora_slots is None:
        return []
    rank = entry.max_lora_rank or DEFAULT_LORA_RANK
    return ["--enable-lora", "--max-loras", str(entry.lora_slots), "--max-lora-rank", str(rank)]


def load_request(name: str, entry: CatalogEntry) -> LoadRequest:
    """The load request an on-demand start of ``entry`` sends to the supervisor."""
    if not isinstance(entry.engine, EngineKind | None):
        raise ValueError(f"catalog entry {name!r} is an external server: nothing to start")
    return LoadRequest(
        model_path=entry.model_path,
        engine=entry.engine,
        served_model_name=name,
        gpu_ids=entry.gpu_ids,
        gpu_memory_limit=entry.gpu_memory_limit,
        tensor_parallel_size=entry.tensor_parallel_size,
        enable_sleep_mode=entry.sleep_level > 0,
        extra_args=[*entry.extra_args, *lora_args(entry)],
    )


def _check_load(where: str, name: str, entry: CatalogEntry, default_engine: EngineKind) -> None:
    """The entry's load fields, checked as the load request it stands for."""
    if not entry.model_path.strip():
        raise EntryInvalid(f"{where}: modelPath: required (what the engine loads)")
    if entry.max_lora_rank is not None and entry.lora_slots is None:
        raise EntryInvalid(f"{where}: maxLoraRank: needs loraSlots (LoRA is off without it)")
    if entry.max_lora_rank is not None and entry.max_lora_rank not in LORA_RANKS:
        choices = ", ".join(str(r) for r in LORA_RANKS)
        raise EntryInvalid(f"{where}: maxLoraRank: must be one of {choices} (vLLM's choices)")
    if entry.lora_slots is not None:
        for flag in LORA_FLAGS:
            if has_flag(list(entry.extra_args), flag):
                raise EntryInvalid(
                    f"{where}: extraArgs: {flag} is set by loraSlots/maxLoraRank; remove it"
                )
    try:
        req = load_request(name, entry)
        check_load_names(req)
    except ValidationError as exc:
        raise EntryInvalid(f"{where}: {_describe(exc)}") from None
    except InvalidRequest as exc:
        raise EntryInvalid(f"{where}: {exc.message}") from None
    try:
        get_adapter(req.engine or default_engine).validate_args(list(req.extra_args))
    except ValueError as exc:
        raise EntryInvalid(f"{where}: extraArgs: {exc}") from None
    if entry.idle_sleep_seconds is not None and entry.sleep_level == 0:
        raise EntryInvalid(f"{where}: idleSleepSeconds: needs sleepLevel 1 or 2 (0 never sleeps)")
    if entry.warmup and entry.sleep_level == 0:
        raise EntryInvalid(f"{where}: warmup: needs sleepLevel 1 or 2 (it runs after a wake)")
    if entry.warmup_prompt is not None and not entry.warmup:
        raise EntryInvalid(f"{where}: warmupPrompt: needs warmup: true")
    bad = first_unsafe(entry.warmup_prompt or "", allowed=TEXT_WHITESPACE)
    if bad is not None:
        raise EntryInvalid(f"{where}: warmupPrompt contains a control character ({bad})")


def check_entry(name: object, data: object, default_engine: EngineKind) -> CatalogEntry:
    """``data`` (YAML mapping or API JSON) as a checked entry, or ``EntryInvalid``."""
    checked_name = check_name(name)
    where = f"catalog entry {checked_name!r}"
    if isinstance(data, CatalogEntry):
        entry = data
    elif not isinstance(data, Mapping):
        raise EntryInvalid(f"{where}: must be a mapping of fields (modelPath, engine, ...)")
    else:
        try:
            entry = CatalogEntry.model_validate(dict(data))
        except ValidationError as exc:
            raise EntryInvalid(f"{where}: {_describe(exc)}") from None
    if entry.adapter_of is not None or entry.adapter_path is not None:
        _check_adapter(where, entry)
        if entry.adapter_of == checked_name:
            raise EntryInvalid(f"{where}: adapterOf: an adapter cannot be its own base")
    elif is_external(entry):
        _check_external(where, entry)
    else:
        for field, alias in _EXTERNAL_ONLY:
            if getattr(entry, field) is not None:
                raise EntryInvalid(f"{where}: {alias}: only for engine external")
        _check_load(where, checked_name, entry, default_engine)
    for alias in entry.aliases:
        problem = name_problem(alias, argv=True)
        if problem is not None:
            raise EntryInvalid(f"{where}: aliases: {alias[:80]!r} {problem}")
        try:
            check_name(alias)
        except EntryInvalid:
            raise EntryInvalid(f"{where}: aliases: {alias!r} is not a usable name") from None
        if alias == checked_name:
            raise EntryInvalid(f"{where}: aliases: {alias!r} is the entry's own name")
    return entry


def check_adapter_base(
    name: str,
    entry: CatalogEntry,
    good: Mapping[str, CatalogEntry],
    bad: Mapping[str, str],
    probe: AdapterProbe | None,
) -> None:
    """An adapter against the catalog: its base is a good vllm/sim entry with
    ``loraSlots``, and its rank (``probe``: read from its folder) fits the base's."""
    where = f"catalog entry {name!r}"
    base_name = entry.adapter_of
    assert base_name is not None
    base = good.get(base_name)
    if base is None:
        if base_name in bad:
            raise EntryInvalid(f"{where}: adapterOf: its base {base_name!r} is invalid")
        raise EntryInvalid(f"{where}: adapterOf: no catalog entry named {base_name!r}")
    if is_adapter(base):
        raise EntryInvalid(f"{where}: adapterOf: {base_name!r} is itself an adapter")
    if is_external(base):
        raise EntryInvalid(
            f"{where}: adapterOf: {base_name!r} is an external server (adapters need a "
            "vllm or sim entry that Sardeenz starts)"
        )
    if base.lora_slots is None:
        raise EntryInvalid(
            f"{where}: adapterOf: {base_name!r} has no loraSlots (LoRA is not enabled on it)"
        )
    if isinstance(probe, str):
        raise EntryInvalid(f"{where}: adapterPath: {probe}")
    limit = base.max_lora_rank or DEFAULT_LORA_RANK
    if probe is not None and probe > limit:
        raise EntryInvalid(
            f"{where}: adapterPath: the adapter's rank {probe} is greater than "
            f"{base_name!r}'s maxLoraRank {limit}"
        )


def check_catalog(
    raw: Mapping[str, Any],
    default_engine: EngineKind,
    adapter_probes: Mapping[str, AdapterProbe] | None = None,
) -> tuple[dict[str, CatalogEntry], dict[str, str]]:
    """Check every entry on its own: (good entries, name -> error) in input order.

    A name (or alias) already used by an earlier good entry makes the later
    entry bad: a request must resolve to one model. Adapters are checked after
    every other entry, against their base; ``adapter_probes`` holds what each
    adapter folder says of its rank (``adapterfiles.probe_ranks``; a folder
    missing from it is not checked here, only by the engine).
    """
    good: dict[str, CatalogEntry] = {}
    bad: dict[str, str] = {}
    taken: dict[str, str] = {}

    def claim(name: str, entry: CatalogEntry) -> None:
        clash = next((n for n in (name, *entry.aliases) if n in taken), None)
        if clash is not None:
            bad[name] = (
                f"catalog entry {name!r}: aliases: {clash!r} already names entry {taken[clash]!r}"
            )
            return
        good[name] = entry
        for n in (name, *entry.aliases):
            taken[n] = name

    adapters: list[tuple[str, CatalogEntry]] = []
    for name, data in raw.items():
        try:
            entry = check_entry(name, data, default_engine)
        except EntryInvalid as exc:
            bad[str(name)] = str(exc)
            continue
        if is_adapter(entry):
            adapters.append((name, entry))
        else:
            claim(name, entry)
    probes = adapter_probes or {}
    for name, entry in adapters:
        try:
            check_adapter_base(name, entry, good, bad, probes.get(entry.adapter_path or ""))
        except EntryInvalid as exc:
            bad[name] = str(exc)
            continue
        claim(name, entry)
    return good, bad
