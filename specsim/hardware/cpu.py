"""The generic CPU device, measured with numpy: bandwidth from large copies, FLOP/s from a matmul.

Both figures are "best of a few repeats" (the least disturbed run), which is what a roofline peak
means. They reflect numpy's BLAS thread count, so fit efficiencies on profiles measured with the same
threads. Memory size comes from ``os.sysconf``.
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

from specsim.hardware.device import CATALOG_DIR, Device
from specsim.jsonio import read_json


def measure_bandwidth_bytes_per_s(n_bytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Best (bytes read + bytes written) / s over ``repeats`` numpy copies of an ``n_bytes`` array."""
    src = np.ones(n_bytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * src.nbytes / best


def measure_flops_per_s(n: int = 1024, repeats: int = 5) -> float:
    """Best 2·n³ / s over ``repeats`` float32 n×n matmuls (numpy's BLAS, its default threads)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: BLAS thread pool start
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def physical_memory_bytes() -> float:
    """Installed RAM (bytes) from sysconf; 0 if the platform does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def measure_cpu(name: str = "cpu") -> Device:
    """Measure this machine now and return it as a Device (about a second)."""
    meta = read_json(CATALOG_DIR / "cpu.json", "device file")
    bw = measure_bandwidth_bytes_per_s()
    flops = measure_flops_per_s()
    stamp = time.strftime("%Y-%m-%d %H:%M")
    sources = {key: f"{meta[key]['source']} ({stamp})" for key in
               ("memory_bandwidth_bytes_per_s", "peak_flops_per_s", "memory_bytes")}
    return Device(name=name, display_name=f"{os.cpu_count()}-core CPU (measured {stamp})", kind="cpu",
                  memory_bandwidth_bytes_per_s=bw, peak_flops_per_s=flops,
                  memory_bytes=physical_memory_bytes() or 1.0, sources=sources, peak_flops_dtype="fp32",
                  vendor="generic", notes=meta.get("notes", ""))


@functools.lru_cache(maxsize=1)
def measured_cpu_device() -> Device:
    """This machine's CPU, measured once per process."""
    return measure_cpu()
