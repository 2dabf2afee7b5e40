"""Architecture presets: HF ``config.json`` dicts shipped as JSON (no weights), and named draft/target pairs.

Plain data owned by specsim and read by both halves: the roofline (:mod:`specsim.hardware.model`) prices
a preset, the calibrate half builds or fetches its model. Each ``<name>.json`` is exactly a config dict
(``"model_type"`` + hyperparameters) with an optional ``"_specsim": {"description", "source"}`` entry,
loadable with ``AutoConfig.for_model(**config)``. ``pairs.json`` maps a pair name to
``{"target": preset, "draft": preset, "profile": shipped profile name, "profiles": every shipped profile
measured on the pair, ...}``. Pure JSON: no torch.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import read_json

_META_KEY = "_specsim"


def _presets_dir():
    return resources.files("specsim") / "presets"


def preset_path(name: str) -> Path | None:
    """The JSON file of a shipped architecture preset, or None when ``name`` is not one."""
    return Path(str(_presets_dir() / f"{name}.json")) if name in preset_names() else None


def preset_names() -> list[str]:
    """Names of the shipped architecture presets (file stems, ``pairs`` excluded)."""
    return sorted(
        p.name[:-5] for p in _presets_dir().iterdir() if p.name.endswith(".json") and p.name != "pairs.json"
    )


def pairs() -> dict[str, dict]:
    """Pair name -> ``{"target": preset name, "draft": preset name, ...}``."""
    return read_json(Path(str(_presets_dir() / "pairs.json")), "pairs file")


def pair(name: str) -> dict:
    """One named pair; SpecsimError naming the known pairs otherwise."""
    known = pairs()
    if name not in known:
        raise SpecsimError(f"unknown preset pair {name!r} (expected one of: {', '.join(sorted(known))})")
    return _checked(known, name)


def pair_models(name: str) -> tuple[str, str]:
    """(target, draft) preset names of a named pair (for pricing: the roofline, ``recommend``)."""
    known = pairs()
    if name not in known:
        raise SpecsimError(f"unknown pair {name!r} (expected one of: {', '.join(known)})")
    entry = _checked(known, name)
    return entry["target"], entry["draft"]


def _checked(known: dict, name: str) -> dict:
    entry = known[name]
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("target"), str)
        or not isinstance(entry.get("draft"), str)
    ):
        raise SpecsimError(f"pairs.json[{name!r}]: expected an object with 'target' and 'draft' strings")
    return entry


def pair_profile(name: str) -> str | None:
    """The shipped profile whose acceptance belongs to a named pair (None when it has none)."""
    return pair(name).get("profile")


def profile_pair(profile_name: str) -> str | None:
    """The named pair measured in the shipped profile ``profile_name``: its ``profile`` or one of its
    ``profiles`` (None when no pair names it)."""
    known = pairs()
    for name in known:
        entry = _checked(known, name)
        if profile_name == entry.get("profile") or profile_name in entry.get("profiles", ()):
            return name
    return None


def load_preset(name_or_path: str | Path) -> dict:
    """The full preset dict (``_specsim`` metadata included) of a preset name or a config JSON path."""
    name = str(name_or_path)
    if name in preset_names():
        data = read_json(preset_path(name), "preset")
        where = f"preset {name!r}"
    else:
        path = Path(name)
        if not name.strip() or not os.path.lexists(path):
            raise SpecsimError(
                f"unknown model config {name!r} (expected a config JSON path or one of: "
                f"{', '.join(preset_names())})"
            )
        data = read_json(path, "config file")
        where = f"config file {name!r}"
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise SpecsimError(f"{where}: expected an HF config object with a 'model_type' string")
    return data


def preset_config(name_or_path: str | Path) -> dict:
    """The HF config dict of a preset (``_specsim`` metadata dropped), ready for ``AutoConfig.for_model``."""
    return {k: v for k, v in load_preset(name_or_path).items() if k != _META_KEY}


def preset_meta(name_or_path: str | Path) -> dict:
    """The ``_specsim`` metadata (description, source) of a preset; empty when absent."""
    return dict(load_preset(name_or_path).get(_META_KEY, {}))
