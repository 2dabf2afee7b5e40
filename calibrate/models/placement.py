"""Placing a model too big for one device over GPUs, CPU and disk with accelerate (``--device-map``).

``device_map`` is ``auto`` (fill devices in order) or ``balanced`` (spread the layers evenly over the GPUs);
``max_memory`` caps what each device may hold: ``cuda:0=20GiB,cpu=64GiB`` (``disk`` is always the last
resort, in a temporary offload folder). Real weights go through ``from_pretrained(device_map=...)``; random
weights are built on the CPU, then dispatched with ``accelerate.infer_auto_device_map`` + ``dispatch_model``.
The placement (module → device, layers compressed into ranges) is recorded in the profile's provenance notes,
because a split model's latency includes the transfers between devices and is not that of one GPU.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any

from specsim.bounds import check_range
from specsim.errors import SpecsimError

DEVICE_MAPS = ("auto", "balanced")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def check_device_map(device_map: str | None) -> str | None:
    if device_map is not None and device_map not in DEVICE_MAPS:
        raise SpecsimError(f"--device-map: expected one of {', '.join(DEVICE_MAPS)}, got {device_map!r}")
    return device_map


def _device_key(name: str, where: str) -> int | str:
    """accelerate's key for a device: GPU index for cuda:N, else 'cpu' / 'disk'."""
    key = name.strip().lower()
    if key in ("cpu", "disk"):
        return key
    m = re.fullmatch(r"(?:cuda:)?(\d+)", key)
    if m:
        return int(m.group(1))
    raise SpecsimError(f"{where}: expected a device cuda:N, N, cpu or disk, got {name!r}")


def parse_max_memory(text: str | None) -> dict[int | str, int] | None:
    """``cuda:0=20GiB,cpu=64GiB`` → {0: 21474836480, 'cpu': 68719476736} (bytes); None passes through."""
    if text is None:
        return None
    out: dict[int | str, int] = {}
    for part in (p for p in text.split(",") if p.strip()):
        name, sep, size = part.partition("=")
        if not sep:
            raise SpecsimError(
                f"--max-memory: expected DEVICE=SIZE entries like cuda:0=20GiB,cpu=64GiB, got {part!r}"
            )
        m = _SIZE.match(size)
        if not m or float(m.group(1)) <= 0:
            raise SpecsimError(
                f"--max-memory: expected a size like 20GiB or 500MB for {name.strip()!r}, "
                f"got {size.strip()!r}"
            )
        size_bytes = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]  # inf for a 400-digit size
        check_range(size_bytes, "bytes", f"--max-memory: {name.strip()}")
        out[_device_key(name, "--max-memory")] = int(size_bytes)
    if not out:
        raise SpecsimError(
            f"--max-memory: expected DEVICE=SIZE entries like cuda:0=20GiB,cpu=64GiB, got {text!r}"
        )
    return out


_OFFLOAD_DIRS: list[tempfile.TemporaryDirectory] = []  # kept alive while the process measures


def offload_folder() -> str:
    """A temporary folder for weights accelerate offloads to disk (removed when the process exits)."""
    d = tempfile.TemporaryDirectory(prefix="specsim-offload-")
    _OFFLOAD_DIRS.append(d)
    return d.name


def pretrained_kwargs(device_map: str, max_memory: dict | None) -> dict:
    """Keyword arguments that make ``from_pretrained`` place the model with accelerate."""
    return {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder()}


def dispatch(model: Any, device_map: str, max_memory: dict | None) -> Any:
    """Place an already built (CPU) model over the devices in ``max_memory`` (GPUs, CPU, then disk)."""
    from accelerate import dispatch_model, infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    no_split = getattr(model, "_no_split_modules", None) or []
    budget = max_memory
    if device_map == "balanced":
        budget = get_balanced_memory(model, max_memory=max_memory, no_split_module_classes=no_split)
    dmap = infer_auto_device_map(model, max_memory=budget, no_split_module_classes=no_split)
    model = dispatch_model(model, device_map=dmap, offload_dir=offload_folder())
    model.hf_device_map = dict(dmap)
    return model


def _device_name(dev: Any) -> str:
    return f"cuda:{dev}" if isinstance(dev, int) else str(dev)


def input_device(model: Any) -> str:
    """Where inputs go: the first placed module's device (CPU when it was offloaded to disk)."""
    dmap = getattr(model, "hf_device_map", None) or {}
    for dev in dmap.values():
        name = _device_name(dev)
        if name not in ("disk", "meta"):
            return name
    return "cpu"


def _compress(names: list[str]) -> str:
    """'model.layers.0', 'model.layers.1', 'model.layers.2' → 'model.layers.0-2'."""
    out: list[str] = []
    for name in names:
        m = re.fullmatch(r"(.*\.)(\d+)", name)
        prev = re.fullmatch(r"(.*\.)(\d+)(?:-(\d+))?", out[-1]) if out else None
        if (
            m
            and prev
            and prev.group(1) == m.group(1)
            and int(prev.group(3) or prev.group(2)) + 1 == int(m.group(2))
        ):
            out[-1] = f"{prev.group(1)}{prev.group(2)}-{m.group(2)}"
        else:
            out.append(name)
    return ", ".join(out)


def placement_summary(model: Any, device_map: str, max_memory: dict | None) -> str:
    """'device map auto (max memory cpu=0.0 GiB): model.embed_tokens, model.layers.0 -> cpu; ... -> disk'."""
    dmap = getattr(model, "hf_device_map", None) or {}
    groups: list[tuple[str, list[str]]] = []
    for module, dev in dmap.items():
        module = module or "the whole model"  # accelerate's key for a map that splits nothing
        name = _device_name(dev)
        if groups and groups[-1][0] == name:
            groups[-1][1].append(module)
        else:
            groups.append((name, [module]))
    caps = (
        ""
        if not max_memory
        else " (max memory "
        + ", ".join(f"{_device_name(k)}={v / 2**30:.2f} GiB" for k, v in max_memory.items())
        + ")"
    )
    if not groups:  # accelerate split nothing (one device holds it all): no map, so name that device
        where = next((str(p.device) for p in model.parameters()), "no parameters")
        return f"device map {device_map}{caps}: the whole model -> {where}"
    return f"device map {device_map}{caps}: " + "; ".join(
        f"{_compress(mods)} -> {dev}" for dev, mods in groups
    )
