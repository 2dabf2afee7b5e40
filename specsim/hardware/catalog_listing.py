"""What ``specsim hardware --list`` shows: every name the planner takes, by kind, with where it comes from.

Sections: architecture presets, preset pairs, shipped model ids (:mod:`~specsim.hardware.model_resolution`),
devices (``hardware/catalog/``), runtimes (``hardware/runtimes/``) and drafting kinds. Each row is a plain
dict, so the command prints it as a table (long ``description`` and ``source`` texts left to ``--json``).
"""

from __future__ import annotations

from specsim.draft_kinds.registry import kind_rows
from specsim.hardware.device import catalog_names, load_device
from specsim.hardware.model_resolution import load_model_spec, shipped_models
from specsim.hardware.runtime import load_runtime, runtime_names
from specsim.presets import pairs, preset_meta, preset_names


def draft_kinds() -> list[dict]:
    """The drafting kinds of :mod:`specsim.draft_kinds.registry` (``--draft-kind``): a draft model, EAGLE
    and EAGLE-3 heads, MTP heads, n-gram and suffix lookup, with how each drafts and the engines' names."""
    return kind_rows()


def _model_row(name: str, aliases: tuple[str, ...], source: str) -> dict:
    spec = load_model_spec(name, dtype="bfloat16")  # parameters only: the weights' format is not listed
    row = {"id": name, "aliases": list(aliases), "params_b": round(spec.params / 1e9, 2)}
    if spec.vision is not None:
        v = spec.vision
        at = f" at {v.image_size}" if v.image_size is not None else ""
        row["vision"] = f"{v.params / 1e6:.0f}M tower+projector, {v.image_tokens} tokens/image{at}"
    return row | {"source": source}


def model_rows() -> list[dict]:
    """The shipped model configs: id, aliases, parameters (B), vision tower and source."""
    return [_model_row(m.id, m.aliases, m.source) for m in shipped_models()]


def preset_rows() -> list[dict]:
    """Architecture presets: name, the hub ids they are, parameters (B) and description."""
    return [
        {
            "name": n,
            "ids": list(preset_meta(n).get("ids", [])),
            "params_b": round(load_model_spec(n).params / 1e9, 2),
            "description": preset_meta(n).get("description", ""),
        }
        for n in preset_names()
    ]


def pair_rows() -> list[dict]:
    return [
        {"name": k, "target": v.get("target"), "draft": v.get("draft"), "profile": v.get("profile")}
        for k, v in pairs().items()
    ]


def device_rows() -> list[dict]:
    """Catalog devices; ``cpu`` is measured on this machine when used, so it is not loaded here."""
    out = []
    for name in catalog_names():
        if name == "cpu":
            out.append({"name": name, "kind": "cpu", "display_name": "this machine, measured when used"})
            continue
        d = load_device(name)
        out.append({"name": name, "kind": d.kind, "display_name": d.display_name})
    return out


def runtime_rows() -> list[dict]:
    rows = []
    for name in runtime_names():
        rt = load_runtime(name)
        rows.append({"name": name, "kind": rt.kind, "display_name": rt.display_name})
    return rows


def catalog_listing() -> dict[str, list[dict]]:
    """Every section of ``--list``, in the order it prints."""
    return {
        "presets": preset_rows(),
        "pairs": pair_rows(),
        "models": model_rows(),
        "devices": device_rows(),
        "runtimes": runtime_rows(),
        "draft_kinds": draft_kinds(),
    }
