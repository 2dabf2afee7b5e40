"""Which model a name means: the one resolver behind every ``--target``/``--draft`` and the published set.

In order: an architecture preset (:mod:`specsim.presets`), a local folder holding ``config.json`` (and,
when there, ``preprocessor_config.json``) or a config JSON file, then a shipped model config by HF id (any
case) or alias. Shipped configs are ``specsim/hardware/model_configs/*.json``: the keys of the model's
``config.json`` the roofline reads, with a ``_specsim`` entry giving its ``id``, ``aliases``, cited
``source`` and, for dynamic-resolution VLMs, the ``preprocessor`` pixel bounds; a preset may name the hub
``ids`` it is the architecture of. Offline: nothing is downloaded.
"""

from __future__ import annotations

import difflib
import functools
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.hardware.image_tokens import ImageSize
from specsim.hardware.model import ModelSpec, spec_from_config
from specsim.jsonio import check_regular_file, read_json, show
from specsim.presets import load_preset, preset_names, preset_path

META_KEY = "_specsim"


@dataclass(frozen=True, eq=False)
class ShippedModel:
    """A model config shipped as data: ``id`` (a HF id, or specsim's name for a modelled head), other
    names, the cited source, the HF config (metadata dropped) and its preprocessor values."""

    id: str
    aliases: tuple[str, ...]
    source: str
    config: dict = field(repr=False)
    processor: dict = field(default_factory=dict, repr=False)
    preset: str | None = None  # the architecture preset it is, when it is one

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


def _model_configs_dir() -> Path:
    return Path(str(resources.files("specsim") / "hardware" / "model_configs"))


def _meta_strings(meta: dict, key: str, where: str) -> tuple[str, ...]:
    values = meta.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise SpecsimError(f"{where}.{key}: expected a list of non-empty strings, got {show(values)}")
    return tuple(values)


def _shipped_file(path: Path) -> ShippedModel:
    where = f"model config {path.name}"
    data = read_json(path, "model config")
    meta = data.get(META_KEY) if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in ("id", "source")):
        raise SpecsimError(f"{where}: expected a '{META_KEY}' object with 'id' and 'source' strings")
    processor = meta.get("preprocessor", {})
    if not isinstance(processor, dict):
        raise SpecsimError(f"{where}.{META_KEY}.preprocessor: expected an object, got {show(processor)}")
    config = {k: v for k, v in data.items() if k != META_KEY}
    aliases = _meta_strings(meta, "aliases", f"{where}.{META_KEY}")
    return ShippedModel(meta["id"], aliases, meta["source"], config, processor)


def _preset_entries() -> list[ShippedModel]:
    """Presets that name the hub ids they are the architecture of (``_specsim.ids``)."""
    out = []
    for name in preset_names():
        data = load_preset(name)
        meta = data.get(META_KEY, {})
        ids = _meta_strings(meta, "ids", f"preset {name!r}.{META_KEY}")
        config = {k: v for k, v in data.items() if k != META_KEY}
        out += [ShippedModel(i, (), str(meta.get("source", "")), config, preset=name) for i in ids]
    return out


@functools.cache
def shipped_models() -> tuple[ShippedModel, ...]:
    """Every shipped model config (files, then presets' hub ids), checked once per process: no name
    (any case) may mean two models."""
    files = sorted(p for p in _model_configs_dir().iterdir() if p.name.endswith(".json"))
    models = [_shipped_file(p) for p in files] + _preset_entries()
    seen: dict[str, str] = {n.lower(): n for n in preset_names()}
    for m in models:
        for n in m.names:
            if n.lower() in seen and seen[n.lower()] != m.preset:
                raise SpecsimError(f"shipped model configs: name {n!r} is taken twice ({seen[n.lower()]!r})")
            seen[n.lower()] = m.id
    return tuple(models)


def find_shipped(name: str) -> tuple[str, ShippedModel] | None:
    """(the name as shipped, the model) for an id or alias in any case; None when nothing ships it."""
    key = str(name).strip().lower()
    for m in shipped_models():
        for n in m.names:
            if n.lower() == key:
                return n, m
    return None


def known_names() -> list[str]:
    """Preset names, shipped ids and aliases: every name :func:`load_model_spec` takes besides a path."""
    return preset_names() + [n for m in shipped_models() for n in m.names]


def closest_names(name: str, n: int = 3) -> list[str]:
    """Up to ``n`` known names spelled most like ``name`` (case ignored)."""
    names = {k.lower(): k for k in known_names()}
    return [names[k] for k in difflib.get_close_matches(str(name).lower(), list(names), n=n, cutoff=0.4)]


def _unknown(name: str) -> SpecsimError:
    text = str(name)
    if Path(text).is_dir():
        return SpecsimError(f"model folder {text!r}: expected a config.json in it")
    if text.endswith(".json") or text.endswith("/"):  # meant as a path: say what is missing there
        return SpecsimError(f"model config {text!r}: no such file or folder")
    near = closest_names(name)
    hint = f"closest: {', '.join(near)}; " if near else ""
    return SpecsimError(
        f"unknown model {name!r} (expected a preset, a shipped model id or alias, a folder with config.json "
        f"or a config JSON path; {hint}`specsim hardware --list` lists them)"
    )


def _local_config(name_or_path: str) -> tuple[Path, dict] | None:
    """(config path, preprocessor values) of a local folder or config file; None when there is none."""
    path = Path(name_or_path)
    path = path / "config.json" if path.is_dir() else path
    if os.path.lexists(path):
        check_regular_file(path, "model config")
    if not path.is_file():
        return None
    pre = path.parent / "preprocessor_config.json"
    processor = read_json(pre, "preprocessor config") if path.name == "config.json" and pre.is_file() else {}
    return path, processor if isinstance(processor, dict) else {}


def _spec(cfg, name: str, where: str, **kw) -> ModelSpec:
    if isinstance(cfg, dict):
        cfg = {k: v for k, v in cfg.items() if k != META_KEY}
    try:
        return spec_from_config(cfg, name, **kw)
    except SpecsimError as err:
        raise SpecsimError(f"{where}: {err}") from None


def _config_of(name_or_path: str) -> tuple[object, str, str, dict | None]:
    """(config, the model's name, where its errors point, preprocessor values or None) of what
    ``name_or_path`` means, in the module docstring's order."""
    preset = preset_path(name_or_path)
    if preset is not None:
        return read_json(preset, "model config"), name_or_path, f"model config {preset.name}", None
    local = _local_config(name_or_path)
    if local is not None:
        path, processor = local
        name = path.parent.name if path.name == "config.json" else path.stem
        return read_json(path, "model config"), name, f"model config {path.name}", processor
    found = find_shipped(name_or_path)
    if found is None:
        raise _unknown(name_or_path)
    name, model = found
    return model.config, name, f"model config {model.id}", model.processor


def load_model_spec(
    name_or_path: str,
    *,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    image_size: ImageSize | None = None,
) -> ModelSpec:
    """The model ``name_or_path`` means (see the module docstring for the order); ``image_size`` sizes a
    dynamic-resolution tower's image tokens (default: the stated typical image)."""
    cfg, name, where, processor = _config_of(name_or_path)
    return _spec(cfg, name, where, dtype=dtype, kv_dtype=kv_dtype, image_size=image_size, processor=processor)


def model_config(name_or_path: str) -> dict:
    """The config dict ``name_or_path`` means (metadata dropped), in :func:`load_model_spec`'s order."""
    cfg = _config_of(name_or_path)[0]
    return {k: v for k, v in cfg.items() if k != META_KEY} if isinstance(cfg, dict) else cfg
