"""Resumable latency calibration: timings done so far are kept in ``<out>.partial`` (:class:`PartialState`,
written atomically after every unit) under an identity of models, device, dtype and threads; a run with the
same identity resumes there, a broken file is reported and measured again, another identity's is refused.
The progress bar starts where the partial file left off.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.models.loaded_model import LoadedModel
from calibrate.run.timing import Timing
from specsim.errors import SpecsimError, warn
from specsim.jsonio import read_json

SCHEMA_VERSION = 2  # of the partial file and of the plan (calibrate.measure.latency_plan)
PARTIAL_SUFFIX = ".partial"  # not ".json": profile folders are scanned for *.json


def show_value(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class PartialState:
    """Timings done so far (key -> Timing) for one identity (models, device, dtype, threads)."""

    identity: dict
    timings: dict[str, Timing] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "identity": self.identity,
            "timings": {k: t.to_json() for k, t in self.timings.items()},
        }


def partial_path(out_path: str | Path) -> Path:
    """Where the partial results of a run writing ``out_path`` live."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + PARTIAL_SUFFIX)


def load_partial(path: Path, identity: dict) -> PartialState:
    """Resume state from ``path``: empty if absent, or if broken (reported on stderr, then overwritten by
    this run); SpecsimError if it is valid but belongs to other models/settings (it may be worth keeping)."""
    import os

    if not os.path.lexists(path):
        return PartialState(identity)
    try:
        data = read_json(path, "partial results")
        timings = partial_timings(data, f"partial results {str(path)!r}")
    except SpecsimError as err:
        warn(f"{err}; ignoring it and measuring from the start")
        return PartialState(identity)
    if data["identity"] != identity:
        other = {k: v for k, v in data["identity"].items() if identity.get(k) != v}
        raise SpecsimError(
            f"partial results {str(path)!r} were measured with {show_value(other)} (expected "
            f"{show_value({k: identity.get(k) for k in other})}; delete the file or pass --no-resume)"
        )
    return PartialState(identity, timings)


def partial_timings(data, where: str) -> dict[str, Timing]:
    """key -> Timing of a partial file's JSON, every field checked (SpecsimError naming the first bad one)."""
    if (
        not isinstance(data, dict)
        or type(data.get("schema_version")) is not int
        or data["schema_version"] != SCHEMA_VERSION
    ):
        raise SpecsimError(
            f"{where}: expected an object with schema_version {SCHEMA_VERSION} written by this tool"
        )
    if not isinstance(data.get("identity"), dict):
        raise SpecsimError(f"{where}.identity: expected an object, got {show_value(data.get('identity'))}")
    timings = data.get("timings")
    if not isinstance(timings, dict):
        raise SpecsimError(f"{where}.timings: expected an object, got {show_value(timings)}")
    return {k: Timing.from_json(v, f"{where}.timings[{k!r}]") for k, v in timings.items()}


def run_identity(models: dict[str, LoadedModel], threads: int) -> dict:
    """What must match for partial results to be reused."""
    ident = {f"{role}": f"{m.name} ({m.weights} weights)" for role, m in models.items()}
    first = models["target"]
    return {**ident, "device": first.device, "dtype": first.dtype, "threads": threads}


def progress_bar(total: float, done: float, done_points: int, progress: bool):
    """A tqdm bar on stderr from ``done`` to ``total`` (the units' weights); says how many points resumed."""
    from tqdm import tqdm

    if done_points and progress:
        print(f"resuming: {done_points} point(s) already measured", file=sys.stderr)
    return tqdm(
        total=total,
        initial=done,
        disable=not progress,
        file=sys.stderr,
        desc="calibrate latency",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed} elapsed, ~{remaining} left]{postfix}",
    )
