"""Devices for the roofline model: one JSON file per device, every number with its source.

A device file holds memory bandwidth (bytes/s), dense BF16/FP16 peak FLOP/s (FP32 for CPUs) and memory size
(bytes), optionally GPU link bandwidths (bytes/s per direction), the INT32 rate (ops/s) and a device-hour's
price (USD). Each number is ``{"value": ..., "source": "..."}``. The shipped catalog is
``specsim/hardware/catalog/*.json``; users pass their own files by path. Names are case-insensitive, with
aliases (:data:`DEVICE_ALIASES`, :func:`resolve_device_name`).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import functools
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specsim.bounds import check_range
from specsim.errors import SpecsimError
from specsim.jsonio import (
    check_object,
    parse_file_data,
    read_json,
    shipped_names,
    shipped_or_user_file,
    sourced,
)

SCHEMA_VERSION = 1
CATALOG_DIR = Path(__file__).parent / "catalog"
DEVICE_DEFAULT = "h100-sxm"  # the device of the commands that price one (serve, recommend)
_NUMBERS = ("memory_bandwidth_bytes_per_s", "peak_flops_per_s", "memory_bytes")
_UNITS = {
    "memory_bandwidth_bytes_per_s": "bytes_per_s",
    "peak_flops_per_s": "flops_per_s",
    "memory_bytes": "bytes",
    "interconnect_bandwidth_bytes_per_s": "bytes_per_s",
    "scale_out_bandwidth_bytes_per_s": "bytes_per_s",
    "interconnect_gpus": "gpus",
    "int32_ops_per_s": "ops_per_s",
    "price_per_hour_usd": "usd_per_hour",
}
_LINK = "interconnect_bandwidth_bytes_per_s"
_SCALE_OUT = "scale_out_bandwidth_bytes_per_s"
_INT32 = "int32_ops_per_s"
_CC = "compute_capability"  # NVIDIA's SM version ("8.0"): which formats its kernels run (dtype_support)
_KEYS = {
    "schema_version",
    "name",
    "display_name",
    "vendor",
    "kind",
    "measure",
    "price_per_hour_usd",
    "notes",
    _LINK,
    "interconnect_gpus",
    _SCALE_OUT,
    _INT32,
    _CC,
    *_NUMBERS,
}
_DTYPES = ("bf16", "fp16", "fp32", "fp8")


# Other spellings of catalog names. A name is compared lower-case, with runs of spaces, '_' and '-' as one '-'
# and leading vendor and brand words dropped (_BRANDS), so what nvidia-smi and torch.cuda.get_device_name()
# print names its entry as it is: "NVIDIA L4", "Tesla T4", "NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe",
# "AMD Instinct MI300X". The aliases below are the spellings that rule does not reach, each with its reason.
_BRANDS = ("nvidia", "tesla", "geforce", "amd", "instinct")
DEVICE_ALIASES = {
    # The bare "H100" is the SXM5 board: NVIDIA's H100 datasheet lists H100 SXM first (then PCIe, now NVL),
    # and the cloud's H100 instances (AWS p5, Google Cloud A3, Azure ND H100 v5) are SXM5 HGX boards. The
    # PCIe card (2.0 vs 3.35 TB/s) is h100-pcie; `specsim hardware` prints the entry it used.
    "h100": "h100-sxm",
    "h100-sxm5": "h100-sxm",  # SXM5 is the H100's SXM socket (the entry's display name)
    "h100-80gb-hbm3": "h100-sxm",  # nvidia-smi's "NVIDIA H100 80GB HBM3"; the PCIe card says "H100 PCIe"
    "h200-sxm": "h200",  # the h200 entry is the SXM board (datasheet's H200 SXM); the H200 NVL is not listed
    "a100-sxm4-40gb": "a100-40gb-sxm",  # nvidia-smi's "NVIDIA A100-SXM4-40GB"
    "a100-sxm4-80gb": "a100-80gb-sxm",  # nvidia-smi's "NVIDIA A100-SXM4-80GB"
    "a100-sxm-40gb": "a100-40gb-sxm",  # the datasheet's words, the catalog's order
    "a100-sxm-80gb": "a100-80gb-sxm",
    "a100-pcie-80gb": "a100-80gb-pcie",
    "rtx3060": "rtx-3060",  # "RTX 3060" written as one word
    "rtx3090": "rtx-3090",
    "rtx4090": "rtx-4090",
}
# Names that fit several entries whose numbers differ, refused with the candidates: NVIDIA's A100 datasheet
# gives 1,555, 2,039 and 1,935 GB/s for the 40GB SXM, 80GB SXM and 80GB PCIe (no convention picks one A100,
# and 40 or 80 GB decides what fits); "h100-80gb" names the memory both H100 entries have (3.35 vs 2.0 TB/s).
AMBIGUOUS_DEVICE_NAMES = {
    "a100": ("a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie"),
    "a100-80gb": ("a100-80gb-sxm", "a100-80gb-pcie"),
    "a100-sxm": ("a100-40gb-sxm", "a100-80gb-sxm"),
    "a100-sxm4": ("a100-40gb-sxm", "a100-80gb-sxm"),
    "h100-80gb": ("h100-sxm", "h100-pcie"),
}


@dataclass(frozen=True)
class Device:
    """One accelerator or CPU: bandwidth (bytes/s), dense peak FLOP/s, memory (bytes), sources."""

    name: str
    display_name: str
    kind: str  # "gpu" | "cpu"
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: float
    memory_bytes: float
    sources: dict[str, str] = field(default_factory=dict)  # field name -> where the number comes from
    peak_flops_dtype: str = "bf16"
    vendor: str = ""
    price_per_hour_usd: float | None = None
    notes: str = ""
    interconnect_bytes_per_s: float | None = None  # per direction per GPU (NVLink, PCIe), for tensor parallel
    interconnect_link: str = ""
    interconnect_gpus: int | None = None  # GPUs the interconnect joins (None: any count)
    scale_out_bytes_per_s: float | None = None  # per direction per GPU beyond interconnect_gpus
    scale_out_link: str = ""
    int32_ops_per_s: float | None = None  # CUDA-core INT32 peak (None: the file does not say)
    compute_capability: str | None = None  # NVIDIA's "major.minor" (None: not NVIDIA, or not stated)
    schema_version: int = SCHEMA_VERSION

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and memory time are equal at peak."""
        return self.peak_flops_per_s / self.memory_bandwidth_bytes_per_s

    def link_bytes_per_s(self, gpus: int) -> float | None:
        """Per-GPU bandwidth (bytes/s, per direction) of a collective over ``gpus`` GPUs: the interconnect
        within the ``interconnect_gpus`` it joins, the scale-out link beyond them; None when the file does not
        say."""
        if self.interconnect_gpus is None or gpus <= self.interconnect_gpus:
            return self.interconnect_bytes_per_s
        return self.scale_out_bytes_per_s

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "name": self.name,
            "display_name": self.display_name,
            "vendor": self.vendor,
            "kind": self.kind,
        }
        for key in _NUMBERS:
            out[key] = {"value": getattr(self, key), "source": self.sources.get(key, "")}
        out["peak_flops_per_s"]["dtype"] = self.peak_flops_dtype
        if self.interconnect_bytes_per_s is not None:
            out[_LINK] = {
                "value": self.interconnect_bytes_per_s,
                "source": self.sources.get(_LINK, ""),
                "link": self.interconnect_link,
            }
        if self.interconnect_gpus is not None:
            out["interconnect_gpus"] = {
                "value": self.interconnect_gpus,
                "source": self.sources.get("interconnect_gpus", ""),
            }
        if self.scale_out_bytes_per_s is not None:
            out[_SCALE_OUT] = {
                "value": self.scale_out_bytes_per_s,
                "source": self.sources.get(_SCALE_OUT, ""),
                "link": self.scale_out_link,
            }
        if self.int32_ops_per_s is not None:
            out[_INT32] = {"value": self.int32_ops_per_s, "source": self.sources.get(_INT32, "")}
        if self.compute_capability is not None:
            out[_CC] = {"value": self.compute_capability, "source": self.sources.get(_CC, "")}
        price, source = self.price_per_hour_usd, self.sources.get("price_per_hour_usd")
        cited = price is not None and source
        out["price_per_hour_usd"] = {"value": price, "source": source} if cited else price
        if self.notes:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = "device") -> Device:
        """Validate a device dict; every error names the field and the bad value."""
        check_object(d, _KEYS, where, schema_version=SCHEMA_VERSION)
        name = _text(d, "name", where)
        kind = d.get("kind", "gpu")
        if kind not in ("gpu", "cpu"):
            raise SpecsimError(f"{where}.kind: expected 'gpu' or 'cpu', got {kind!r}")
        values, sources = {}, {}
        for key in _NUMBERS:
            values[key], sources[key] = _quantity(d, key, where)
        dtype = d["peak_flops_per_s"].get("dtype", "bf16")
        if dtype not in _DTYPES:
            raise SpecsimError(
                f"{where}.peak_flops_per_s.dtype: expected one of {list(_DTYPES)}, got {dtype!r}"
            )
        link, link_name = None, ""
        if d.get(_LINK) is not None:
            link, sources[_LINK] = _quantity(d, _LINK, where)
            link_name = str(d[_LINK].get("link", ""))
        link_gpus = None
        if d.get("interconnect_gpus") is not None:
            value, sources["interconnect_gpus"] = _quantity(d, "interconnect_gpus", where)
            if value != int(value) or value < 2:
                raise SpecsimError(
                    f"{where}.interconnect_gpus.value: expected an integer >= 2, got {value!r}"
                )
            link_gpus = int(value)
        scale_out, scale_out_name = None, ""
        if d.get(_SCALE_OUT) is not None:
            scale_out, sources[_SCALE_OUT] = _quantity(d, _SCALE_OUT, where)
            scale_out_name = str(d[_SCALE_OUT].get("link", ""))
        int32 = None
        if d.get(_INT32) is not None:
            int32, sources[_INT32] = _quantity(d, _INT32, where)
        cc = None
        if d.get(_CC) is not None:
            cc, sources[_CC] = sourced(d[_CC], f"{where}.{_CC}", "NVIDIA's compute capability table")
            if not isinstance(cc, str) or not re.fullmatch(r"\d{1,2}\.\d", cc):
                raise SpecsimError(f"{where}.{_CC}.value: expected a version such as '8.0', got {cc!r}")
        price = d.get("price_per_hour_usd")
        if isinstance(price, dict):  # the catalog's form: {"value": USD, "source": "a dated price list"}
            price, sources["price_per_hour_usd"] = _quantity(d, "price_per_hour_usd", where)
        if price is not None and (
            isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0
        ):
            raise SpecsimError(f"{where}.price_per_hour_usd: expected null or a number >= 0, got {price!r}")
        if price is not None:
            check_range(price, "usd_per_hour", f"{where}.price_per_hour_usd")
        return cls(
            name=name,
            display_name=d.get("display_name") or name,
            kind=kind,
            sources=sources,
            peak_flops_dtype=dtype,
            vendor=str(d.get("vendor", "")),
            price_per_hour_usd=None if price is None else float(price),
            notes=str(d.get("notes", "")),
            interconnect_bytes_per_s=link,
            interconnect_link=link_name,
            interconnect_gpus=link_gpus,
            scale_out_bytes_per_s=scale_out,
            scale_out_link=scale_out_name,
            int32_ops_per_s=int32,
            compute_capability=cc,
            **values,
        )

    def with_price(self, price_per_hour_usd: float | None, source: str = "") -> Device:
        """A copy with the user's price per hour (USD), ``source`` saying where it comes from."""
        sources = {k: v for k, v in self.sources.items() if k != "price_per_hour_usd"}
        return replace(
            self,
            price_per_hour_usd=price_per_hour_usd,
            sources=sources | ({"price_per_hour_usd": source} if source else {}),
        )


def _text(d: dict, key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SpecsimError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _quantity(d: dict, key: str, where: str) -> tuple[float, str]:
    value, source = sourced(
        d.get(key), f"{where}.{key}", "the datasheet or measurement this number comes from"
    )
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > 0
        or value == float("inf")
    ):
        raise SpecsimError(f"{where}.{key}.value: expected a finite number > 0, got {value!r}")
    check_range(value, _UNITS[key], f"{where}.{key}.value")
    return float(value), source


def catalog_names() -> list[str]:
    """Names of the shipped devices (file stems), ``cpu`` included."""
    return shipped_names(CATALOG_DIR)


def resolve_device_name(name: str) -> str | None:
    """The catalog name ``name`` stands for (itself, any case or spacing, or an alias), or None.

    SpecsimError naming the candidates for a name that fits several entries (``a100``).
    """
    names = catalog_names()
    if name in names:
        return name
    words = [w for w in re.split(r"[\s_-]+", name.strip().lower()) if w]
    while len(words) > 1 and words[0] in _BRANDS:
        words.pop(0)
    key = "-".join(words)
    if key in AMBIGUOUS_DEVICE_NAMES:
        raise SpecsimError(
            f"device {name!r} is ambiguous: the catalog has {', '.join(AMBIGUOUS_DEVICE_NAMES[key])}, whose "
            "bandwidth or memory differ (expected one of them)"
        )
    key = DEVICE_ALIASES.get(key, key)
    return key if key in names else None


def load_device(name_or_path: str) -> Device:
    """A catalog name (``h100-sxm``, ``cpu``; any case, or an alias: :func:`resolve_device_name`) or a path
    to a user device JSON file (an existing file wins over an alias)."""
    if not str(name_or_path).strip():
        raise SpecsimError(f"--device: expected a catalog name or a device JSON file, got {name_or_path!r}")
    if not os.path.lexists(name_or_path):
        name_or_path = resolve_device_name(name_or_path) or name_or_path
    path = shipped_or_user_file(name_or_path, CATALOG_DIR, "device")
    data = read_json(path, "device file")
    measure = data.get("measure", False) if isinstance(data, dict) else False
    if not isinstance(measure, bool):
        raise SpecsimError(f"device file {path.name}: measure: expected true or false, got {measure!r}")
    if measure and path.resolve().parent != CATALOG_DIR.resolve():
        # Measuring would silently replace the file's numbers with this machine's.
        raise SpecsimError(
            f"device file {path.name}: \"measure\": true is only for the shipped 'cpu' entry; "
            "remove it to use this file's numbers, or pass --device cpu to measure this machine"
        )
    if measure:
        return measured_cpu_device()
    return parse_file_data(data, path, "device", Device.from_json)


def load_devices(names_or_paths: list[str] | None = None, *, include_cpu: bool = False) -> list[Device]:
    """Load several devices; None means the whole GPU catalog (this CPU, measured, only if ``include_cpu``).

    The local CPU is measured only when asked for (``cpu`` named, or ``include_cpu``), never as a side effect.
    """
    if not names_or_paths:
        names_or_paths = [n for n in catalog_names() if include_cpu or n != "cpu"]
    devices = [load_device(n) for n in names_or_paths]
    seen: set[str] = set()
    for dev in devices:
        if dev.name in seen:
            raise SpecsimError(f"device {dev.name!r} given twice")
        seen.add(dev.name)
    return devices


def measure_cpu(name: str = "cpu") -> Device:
    """Measure this machine now and return it as a Device (about a second)."""
    from specsim.hardware.cpu import measure_bandwidth_bytes_per_s, measure_flops_per_s, physical_memory_bytes

    meta = read_json(CATALOG_DIR / "cpu.json", "device file")
    bw = measure_bandwidth_bytes_per_s()
    flops = measure_flops_per_s()
    stamp = time.strftime("%Y-%m-%d %H:%M")
    sources = {
        key: f"{meta[key]['source']} ({stamp})"
        for key in ("memory_bandwidth_bytes_per_s", "peak_flops_per_s", "memory_bytes")
    }
    return Device(
        name=name,
        display_name=f"{os.cpu_count()}-core CPU (measured {stamp})",
        kind="cpu",
        memory_bandwidth_bytes_per_s=bw,
        peak_flops_per_s=flops,
        memory_bytes=physical_memory_bytes() or 1.0,
        sources=sources,
        peak_flops_dtype="fp32",
        vendor="generic",
        notes=meta.get("notes", ""),
    )


@functools.lru_cache(maxsize=1)
def measured_cpu_device() -> Device:
    """This machine's CPU, measured once per process."""
    return measure_cpu()
