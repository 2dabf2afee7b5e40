"""``specsim calibrate cpu-device``: measure this CPU's memory bandwidth and peak FLOP/s into a device JSON.

Numpy only (:func:`specsim.hardware.device.measure_cpu`); the file feeds ``specsim hardware --device FILE``.
"""

from __future__ import annotations

import argparse

from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json, write_json_atomic


def register(sub) -> None:
    """Add ``specsim calibrate cpu-device``."""
    c = sub.add_parser("cpu-device", help="measure this CPU (numpy) and write a device JSON file")
    c.add_argument("--out", required=True, help="where to write the device JSON")
    c.add_argument("--name", default="my-cpu", help="device name (default my-cpu)")
    c.add_argument(
        "--json",
        action="store_true",
        help="print what was written as one JSON object (out, name, memory_bandwidth_bytes_per_s, "
        "peak_flops_per_s with peak_flops_dtype, memory_bytes) instead of the text line",
    )
    c.set_defaults(func=cmd_cpu_device)


def cmd_cpu_device(args: argparse.Namespace) -> int:
    """Measure, write --out atomically, print the figures."""
    from specsim.hardware.device import measure_cpu

    if not args.name.strip():  # a device is chosen by its name (--device NAME)
        raise SpecsimError(f"--name: expected a device name, got {args.name!r}")
    check_writable(args.out, "--out")
    dev = measure_cpu(args.name)
    write_json_atomic(args.out, dev.to_json())
    if args.json:
        print(dumps_json(cpu_device_summary(args.out, dev)))
        return 0
    print(
        f"wrote {args.out}: {dev.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
        f"{dev.peak_flops_per_s / 1e9:.1f} GFLOP/s fp32, {dev.memory_bytes / 1e9:.1f} GB"
    )
    return 0


def cpu_device_summary(out: str, dev) -> dict:
    """The figures the text line prints, in SI units (bytes/s, FLOP/s, bytes), with the file written."""
    return {
        "out": str(out),
        "name": dev.name,
        "display_name": dev.display_name,
        "memory_bandwidth_bytes_per_s": dev.memory_bandwidth_bytes_per_s,
        "peak_flops_per_s": dev.peak_flops_per_s,
        "peak_flops_dtype": dev.peak_flops_dtype,
        "memory_bytes": dev.memory_bytes,
    }
