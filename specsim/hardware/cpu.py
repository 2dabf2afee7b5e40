"""This CPU measured with numpy: bandwidth from large copies, FLOP/s from a matmul, memory size.

:func:`specsim.hardware.device.measure_cpu` turns the figures into a :class:`Device`.

Both figures are "best of a few repeats" (the least disturbed run), which is what a roofline peak
means. They reflect numpy's BLAS thread count, so fit efficiencies on profiles measured with the same
threads. Memory size comes from ``os.sysconf``.
"""

from __future__ import annotations

import os
import time

import numpy as np


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
