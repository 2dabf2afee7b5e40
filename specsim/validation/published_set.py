"""The published GPU measurement set: ``specsim/data/published_gpu_measurements.json``, every row cited.

Rows: ``sd`` (draft-model SD: γ, τ, measured speedup and/or SD ms per token), ``decode`` (target-only ms per
token), ``pass`` (one target forward over ``pass_new_tokens`` new positions, ms). τ is specsim's τ (tokens per
block, bonus included); a derived τ is flagged (``tau_derivation``). A ``ratio_to`` row is compared as
``speedup_ratio`` (τ cancels). Kept out for an independent check: the Spec-Bench leaderboard, the EAGLE
papers' SpS / vanilla-SD rows, SpecDecode-Bench (arXiv 2601.11580).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specsim.bounds import check_range
from specsim.draft_kinds.registry import draft_kind
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.model import ModelSpec, spec_from_config
from specsim.hardware.model_resolution import find_shipped, load_model_spec
from specsim.hardware.parallel import timing_gpus
from specsim.hardware.runtime import load_runtime
from specsim.hardware.weight_formats import dtype_bytes, kv_dtype_bytes
from specsim.jsonio import check_schema_version, read_json, show
from specsim.validation.load_spec import ServedLoad, parse_load
from specsim.validation.sources import RESERVED_KEYS, Source, is_reserved, is_reserved_row

DATA_FILE = "data/published_gpu_measurements.json"
_PARALLEL = ("none", "tensor", "layer-split")


@dataclass(frozen=True)
class Row:
    """One published measurement (see module docstring); ms in milliseconds, contexts in tokens."""

    id: str
    source: str
    kind: str  # "sd" | "decode" | "pass"
    where: str
    target: str
    device: str
    runtime: str
    batch: int
    weights_dtype: str
    kv_dtype: str
    target_context_tokens: float
    gpus: int = 1
    parallel: str = "none"
    draft: str | None = None
    draft_kind: str = "model"  # a drafting kind (specsim.draft_kinds.registry): model, eagle3, ngram, ...
    draft_weights_dtype: str | None = None
    draft_context_tokens: float | None = None
    gamma: float | None = None
    tau: float | None = None
    tau_definition: str = ""
    tau_derivation: str | None = None
    speedup: float | None = None
    sd_ms_per_token: float | None = None
    target_ms_per_token: float | None = None
    multimodal: bool = False
    flags: tuple[str, ...] = ()
    draft_tp: int = 1  # tensor-parallel degree of the draft (MagicDec shards a 1.1B draft over 4 GPUs)
    ratio_to: str | None = None  # id of the reference row of a ``speedup_ratio`` comparison
    speedup_ratio: float | None = None  # speedup / reference row's speedup (set when the set is parsed)
    pass_new_tokens: int | None = None  # a ``pass`` row: new positions per sequence in the one forward
    pass_ms: float | None = None  # a ``pass`` row: the forward's time (ms)
    # Draft forwards per block beyond γ when the row's tool differs from its runtime's usual one (None: the
    # runtime's ``extra_draft_forwards_per_block``), e.g. llama.cpp's speculative example against
    # llama-server.
    extra_draft_forwards_per_block: float | None = None
    load: ServedLoad | None = None  # the serving benchmark's load, when the source gives it (``load_spec``)
    # Compared only as a served load (its flags say why: e.g. requests waited for KV cache, so no decode batch
    # of its size ran); left out of the decode-phase table, the fits and the sweeps.
    served_only: bool = False

    @property
    def split(self) -> str:
        """The row's split mode (:data:`specsim.hardware.parallel.SPLIT_MODES`)."""
        return "layer" if self.parallel == "layer-split" else "tensor"

    @property
    def tp(self) -> int:
        """GPUs a pass's time divides over (a layer split runs one GPU at a time: priced as one)."""
        return timing_gpus(self.gpus, self.split) if self.parallel != "none" else 1

    @property
    def observable(self) -> str | None:
        """What is compared: 'speedup', 'sd_ms_per_token', 'target_ms_per_token', 'pass_ms' or
        'speedup_ratio'; None: not predictable."""
        if self.kind == "decode":
            return "target_ms_per_token"
        if self.kind == "pass":
            return "pass_ms"
        if self.served_only:
            return None
        if self.speedup_ratio is not None:
            return "speedup_ratio"
        if self.tau is None:
            return None
        return "speedup" if self.speedup is not None else "sd_ms_per_token"

    @property
    def measured(self) -> float | None:
        return None if self.observable is None else getattr(self, self.observable)


@dataclass(frozen=True, eq=False)
class PublishedSet:
    sources: dict[str, Source]
    models: dict[str, dict]
    rows: tuple[Row, ...]
    description: str = ""
    model_sources: dict[str, str] = field(default_factory=dict)

    def model(self, name: str, dtype: str, kv_dtype: str) -> ModelSpec:
        """ModelSpec of a row's model: ``preset:NAME`` (calibrate preset), a key of the file's ``models``, or
        a shipped model config's id or alias (:mod:`specsim.hardware.model_resolution`)."""
        if name.startswith("preset:"):
            return load_model_spec(name.removeprefix("preset:"), dtype=dtype, kv_dtype=kv_dtype)
        if name in self.models:
            return spec_from_config(self.models[name], name, dtype=dtype, kv_dtype=kv_dtype)
        shipped = find_shipped(name)[1]
        kw = {"dtype": dtype, "kv_dtype": kv_dtype, "processor": shipped.processor}
        return spec_from_config(shipped.config, name, **kw)


def _field(
    d: dict,
    key: str,
    where: str,
    kind,
    *,
    optional: bool = False,
    lo: float | None = None,
    unit: str | None = None,
):
    """``d[key]`` of type ``kind`` (>= ``lo``; numbers within ``unit``'s plausible range,
    :mod:`specsim.bounds`)."""
    value = d.get(key)
    if value is None:
        if optional:
            return None
        raise SpecsimError(f"{where}.{key}: missing")
    ok = (
        isinstance(value, kind) and not isinstance(value, bool)
        if kind is not bool
        else isinstance(value, bool)
    )
    if not ok or (lo is not None and value < lo):
        want = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
            kind, "a number"
        )
        raise SpecsimError(
            f"{where}.{key}: expected {want}{'' if lo is None else f' >= {lo:g}'}, got {show(value)}"
        )
    if unit is not None:
        check_range(value, unit, f"{where}.{key}")
    return value


_ROW_KEYS = ({f.name for f in fields(Row)} - {"speedup_ratio"}) | {"context_derivation", "gamma_schedule"}


@functools.lru_cache(maxsize=256)
def _unknown(kind: str, name: str) -> str | None:
    """Why a row's device, runtime or preset model is none the project knows (None: it is known)."""
    try:
        {"device": load_device, "runtime": load_runtime, "model": load_model_spec}[kind](name)
    except SpecsimError as err:
        return str(err)
    return None


def _row(d: Any, where: str, sources: dict, models: dict) -> Row:
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object, got {type(d).__name__}")
    if extra := sorted(set(d) - _ROW_KEYS):  # a typo is no field; context_derivation is words
        raise SpecsimError(f"{where}: unknown field {extra[0]!r} (expected the shipped set's row keys)")
    num = (int, float)
    kind = _field(d, "kind", where, str)
    if kind not in ("sd", "decode", "pass"):
        raise SpecsimError(f"{where}.kind: expected 'sd', 'decode' or 'pass', got {kind!r}")
    source = _field(d, "source", where, str)
    if source not in sources:
        raise SpecsimError(f"{where}.source: expected one of {sorted(sources)}, got {source!r}")
    if any(word in source.lower() for word in RESERVED_KEYS):
        raise SpecsimError(
            f"{where}.source: {source!r} is reserved for an independent check and must stay out"
        )
    for key in ("target", "draft"):
        name = _field(d, key, where, str, optional=True)
        if name and name.startswith("preset:") and (why := _unknown("model", name.removeprefix("preset:"))):
            raise SpecsimError(f"{where}.{key}: {why}")
        if not (name is None or name.startswith("preset:") or name in models or find_shipped(name)):
            raise SpecsimError(
                f"{where}.{key}: expected 'preset:NAME', a shipped model id or alias (`specsim hardware "
                f"--list`) or one of the file's models {sorted(models)}, got {name!r}"
            )
    parallel = d.get("parallel", "none")
    if parallel not in _PARALLEL:
        raise SpecsimError(f"{where}.parallel: expected one of {list(_PARALLEL)}, got {parallel!r}")
    for key in ("weights_dtype", "draft_weights_dtype"):
        if _field(d, key, where, str, optional=True) is not None:
            dtype_bytes(d[key])
    kv_dtype_bytes(_field(d, "kv_dtype", where, str))
    flags = d.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise SpecsimError(f"{where}.flags: expected a list of strings, got {show(flags)}")
    row = Row(
        id=_field(d, "id", where, str),
        source=source,
        kind=kind,
        where=_field(d, "where", where, str),
        target=_field(d, "target", where, str),
        device=_field(d, "device", where, str),
        runtime=_field(d, "runtime", where, str),
        batch=_field(d, "batch", where, int, unit="batch"),
        weights_dtype=_field(d, "weights_dtype", where, str),
        kv_dtype=d["kv_dtype"],
        target_context_tokens=float(_field(d, "target_context_tokens", where, num, unit="tokens")),
        gpus=_field(d, "gpus", where, int, unit="gpus"),
        parallel=parallel,
        draft=_field(d, "draft", where, str, optional=True),
        draft_kind=draft_kind(d.get("draft_kind"), f"{where}.draft_kind").name,
        draft_weights_dtype=_field(d, "draft_weights_dtype", where, str, optional=True),
        draft_context_tokens=_field(d, "draft_context_tokens", where, num, optional=True, unit="tokens"),
        gamma=_field(d, "gamma", where, num, optional=True, unit="gamma"),
        tau=_field(d, "tau", where, num, optional=True, lo=1),
        tau_definition=str(d.get("tau_definition", "")),
        tau_derivation=_field(d, "tau_derivation", where, str, optional=True),
        speedup=_field(d, "speedup", where, num, optional=True, unit="ratio"),
        sd_ms_per_token=_field(d, "sd_ms_per_token", where, num, optional=True, unit="ms"),
        target_ms_per_token=_field(d, "target_ms_per_token", where, num, optional=True, unit="ms"),
        multimodal=_field(d, "multimodal", where, bool, optional=True) or False,
        flags=tuple(flags),
        draft_tp=_field(d, "draft_tp", where, int, optional=True, unit="gpus") or 1,
        ratio_to=_field(d, "ratio_to", where, str, optional=True),
        pass_new_tokens=_field(d, "pass_new_tokens", where, int, optional=True, lo=1, unit="tokens"),
        pass_ms=_field(d, "pass_ms", where, num, optional=True, unit="ms"),
        extra_draft_forwards_per_block=_field(
            d, "extra_draft_forwards_per_block", where, num, optional=True, lo=0
        ),
        load=parse_load(d.get("load"), f"{where}.load"),
        served_only=_field(d, "served_only", where, bool, optional=True) or False,
    )
    if row.kind == "sd" and is_reserved_row(sources[source], row.draft_kind):
        raise SpecsimError(
            f"{where}: an SpS (separate draft model) row of {sources[source].title!r} is reserved for an "
            "independent check and must stay out (only the EAGLE papers' head rows may be used)"
        )
    for key in ("device", "runtime"):  # here, where the row is named, not where it is priced
        if why := _unknown(key, getattr(row, key)):
            raise SpecsimError(f"{where}.{key}: {why}")
    _check_row(row, where)
    return row


_SAME_FOR_RATIO = (
    "source",
    "kind",
    "target",
    "draft",
    "draft_kind",
    "device",
    "runtime",
    "gpus",
    "parallel",
    "draft_tp",
    "weights_dtype",
    "draft_weights_dtype",
    "kv_dtype",
    "gamma",
    "target_context_tokens",
    "draft_context_tokens",
)


def _with_ratios(rows: tuple[Row, ...], name: str) -> tuple[Row, ...]:
    """Set ``speedup_ratio`` on rows with ``ratio_to``; the reference must differ only in batch size."""
    by_id = {r.id: r for r in rows}
    out = []
    for i, row in enumerate(rows):
        if row.ratio_to is not None:
            where = f"{name}.rows[{i}].ratio_to"
            ref = by_id.get(row.ratio_to)
            if ref is None or ref.id == row.id:
                raise SpecsimError(f"{where}: expected the id of another row, got {row.ratio_to!r}")
            diff = [k for k in _SAME_FOR_RATIO if getattr(ref, k) != getattr(row, k)]
            if diff or row.speedup is None or ref.speedup is None:
                raise SpecsimError(
                    f"{where}: row {ref.id!r} must have a speedup and differ only in batch size "
                    f"(differs in {diff or ['speedup missing']})"
                )
            row = replace(row, speedup_ratio=row.speedup / ref.speedup)
        out.append(row)
    return tuple(out)


def _check_row(row: Row, where: str) -> None:
    if row.served_only and (row.load is None or row.speedup is None or row.tau is None):
        raise SpecsimError(f"{where}.served_only: needs the row's load, speedup and tau (it is only served)")
    if row.kind == "sd":
        lookup = not draft_kind(row.draft_kind).has_model
        if lookup and row.draft is not None:
            raise SpecsimError(
                f"{where}.draft: a {row.draft_kind!r} row drafts with no model, got {row.draft!r}"
            )
        for key in ("gamma",) if lookup else ("draft", "gamma", "draft_weights_dtype"):
            if getattr(row, key) is None:
                raise SpecsimError(f"{where}.{key}: missing (an 'sd' row needs it)")
        if row.tau is not None and row.tau > row.gamma + 1 + 1e-9:
            raise SpecsimError(
                f"{where}.tau: expected 1 <= tau <= gamma+1 = {row.gamma + 1:g}, got {row.tau}"
            )
        if row.speedup is None and row.sd_ms_per_token is None:
            raise SpecsimError(f"{where}: expected speedup or sd_ms_per_token, got neither")
        if row.load is None and None not in (row.tau, row.speedup) and row.speedup > row.tau + 1e-9:
            raise SpecsimError(  # under load queueing may lift a TPOT ratio past tau; one block cannot
                f"{where}.speedup: expected at most tau = {row.tau:g} (a block of tau tokens costs at "
                f"least one target decode), got {row.speedup:g}"
            )
        if row.tau is not None and not row.tau_definition:
            raise SpecsimError(f"{where}.tau_definition: missing (say whether the bonus token is counted)")
        if row.tau is None and not row.tau_derivation:
            raise SpecsimError(
                f"{where}.tau_derivation: missing (a row without tau must say why it has none; "
                "validate prints it as the reason the row is not predicted)"
            )
    elif row.kind == "pass":
        for key in ("pass_new_tokens", "pass_ms"):
            if getattr(row, key) is None:
                raise SpecsimError(f"{where}.{key}: missing (a 'pass' row needs it)")
    elif row.target_ms_per_token is None:
        raise SpecsimError(f"{where}.target_ms_per_token: missing (a 'decode' row needs it)")


def _source(key: str, d: Any, where: str) -> Source:
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object, got {type(d).__name__}")
    src = Source(
        key,
        _field(d, "title", where, str),
        _field(d, "authors", where, str),
        _field(d, "year", where, int, lo=1900),
        _field(d, "venue", where, str),
        _field(d, "where", where, str),
    )
    if is_reserved(src):
        raise SpecsimError(
            f"{where}: {src.title!r} is reserved for an independent check (the Spec-Bench "
            "leaderboard or SpecDecode-Bench) and must stay out"
        )
    return src


def parse_published_set(data: Any, name: str = "published set") -> PublishedSet:
    """Validate the set; every error names the row/field and the bad value."""
    check_schema_version(data, 1, name)
    srcs = data.get("sources")
    if not isinstance(srcs, dict) or not srcs:
        raise SpecsimError(f"{name}.sources: expected a non-empty object of citations")
    sources = {k: _source(k, v, f"{name}.sources[{k!r}]") for k, v in srcs.items()}
    models_in = data.get("models", {})
    if not isinstance(models_in, dict):
        raise SpecsimError(f"{name}.models: expected an object of model configs, got {show(models_in)}")
    for k, v in models_in.items():
        if not isinstance(v, dict) or not isinstance(v.get("config"), dict):
            raise SpecsimError(
                f"{name}.models[{k!r}]: expected an object with a 'config' object, got {show(v)}"
            )
    models = {k: v["config"] for k, v in models_in.items()}
    rows_in = data.get("rows")
    if not isinstance(rows_in, list) or not rows_in:
        raise SpecsimError(f"{name}.rows: expected a non-empty list")
    rows = tuple(_row(r, f"{name}.rows[{i}]", sources, models) for i, r in enumerate(rows_in))
    ids = [r.id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecsimError(f"{name}.rows: duplicate id {dup[0]!r}")
    rows = _with_ratios(rows, name)
    cited = {k: str(v.get("source", "")) for k, v in models_in.items()}
    for model in {n for r in rows for n in (r.target, r.draft) if n and n not in models}:
        if not model.startswith("preset:"):
            cited[model] = find_shipped(model)[1].source
    return PublishedSet(sources, models, rows, str(data.get("description", "")), cited)


def load_published_set(path: str | Path | None = None) -> PublishedSet:
    """The shipped set, or a user file of the same form."""
    if path is None:
        data = read_json(Path(str(resources.files("specsim") / DATA_FILE)), "published set")
        return parse_published_set(data, "published_gpu_measurements.json")
    data = read_json(Path(path), "published set")
    return parse_published_set(data, Path(path).name)
