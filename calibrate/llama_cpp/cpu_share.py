"""How much of the machine a timed interval got: cores used by our processes and by everyone else.

The project's 2-core hosts are shared; a lock keeps heavy runs apart, but light work of others still runs.
Each timed llama.cpp request is wrapped in :class:`CpuShare`: from ``/proc/stat`` (all CPUs' busy jiffies)
and ``/proc/PID/stat`` (utime + stime of the server and of this process) it gives the cores we used and
the cores others used over the interval, so a run that lost its core (``ours`` well below the threads it
runs) can be told apart and repeated (:func:`starved`). On a host without ``/proc`` both read 0.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def _busy_jiffies() -> int:
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:9]]
    except OSError:
        return 0
    return sum(v) - v[3] - v[4]  # idle and iowait are not busy


def _pid_jiffies(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return 0
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (all threads)


@dataclass
class CpuShare:
    """Context manager: after the block, ``ours`` and ``foreign`` are the cores (CPU-seconds per second)
    that ``pids`` plus this process, and every other process, used during it; ``seconds`` its wall time."""

    pids: tuple[int, ...] = ()
    ours: float = 0.0
    foreign: float = 0.0
    seconds: float = 0.0

    def _ours(self) -> int:
        return sum(_pid_jiffies(p) for p in (*self.pids, os.getpid()))

    def __enter__(self) -> CpuShare:
        self._t0, self._busy0, self._ours0 = time.perf_counter(), _busy_jiffies(), self._ours()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = max(time.perf_counter() - self._t0, 1e-9)
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        ours = (self._ours() - self._ours0) / hz
        busy = (_busy_jiffies() - self._busy0) / hz
        self.ours = ours / self.seconds
        self.foreign = max(busy - ours, 0.0) / self.seconds


def starved(share: CpuShare, threads: int, *, min_share: float = 0.9) -> bool:
    """True when the interval's own processes got less than ``min_share`` of the ``threads`` cores they
    compute on (another process took the core), judged only on intervals long enough to count (≥ 0.5 s)."""
    return share.seconds >= 0.5 and share.ours < min_share * threads
