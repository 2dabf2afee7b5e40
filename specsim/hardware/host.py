"""This host's CPU model, and a note when a profile's timings come from another one (numpy-free: read from
``/proc/cpuinfo`` where it exists, else :func:`platform.processor`).

A CPU profile names its device ``cpu: MODEL (N logical CPUs)`` (``calibrate latency``); its milliseconds,
and every speedup priced from them, are that machine's. A GPU profile's device is not compared: this host's
GPU is not known without torch.
"""

from __future__ import annotations

import os
import platform


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The first ``model name`` of ``cpuinfo`` (Linux), else the platform's processor string, else None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor().strip() or None


def cpu_device_name() -> str:
    """This host's CPU as a profile's provenance names it: ``cpu: MODEL (N logical CPUs)``."""
    return f"cpu: {cpu_model() or platform.machine() or 'cpu'} ({os.cpu_count()} logical CPUs)"


def measured_cpu(device: str) -> str | None:
    """The CPU model of a profile's provenance device ``cpu: MODEL (N logical CPUs)`` (None: not a CPU's)."""
    if not device.startswith("cpu:"):
        return None
    model = device.removeprefix("cpu:").strip()
    return (model.rsplit(" (", 1)[0] if model.endswith(" logical CPUs)") else model).strip() or None


def contended_note(profile) -> str | None:
    """Why ``profile``'s latency may not hold anywhere: its calibration's sentinel step moved past its
    threshold while it measured (``host_check.contended``), or None."""
    model = getattr(getattr(profile, "latency", None), "cost_model", None)
    check = getattr(model, "host_check", None)
    if check is None or not check.contended:
        return None
    return (
        f"profile {profile.name}'s latency was measured on a contended host: the sentinel step took "
        f"{check.start_ms:.3f} ms at the start and {check.end_ms:.3f} ms at the end "
        f"({check.rel_change:+.1%}; threshold {check.threshold:.1%}), so its ms, and the speedups priced "
        "from them, may be off"
    )


def other_host_note(profile, here: str | None = None) -> str | None:
    """Why ``profile``'s latency may not hold on this host (``here``: its CPU model, read when None), or None
    when it was measured on this CPU model, or on something that cannot be compared."""
    latency = getattr(profile, "latency", None)
    if latency is None:
        return None
    provenance = latency.provenance or profile.provenance
    measured = measured_cpu(provenance.device if provenance is not None else "")
    here = cpu_model() if here is None else here
    if measured is None or here is None or measured == here:
        return None
    return (
        f"profile {profile.name}'s latency was measured on another CPU ({measured!r}; this host: {here!r}): "
        "its ms, and the speedups priced from them, may not hold here (`specsim calibrate latency` measures "
        "this host)"
    )
