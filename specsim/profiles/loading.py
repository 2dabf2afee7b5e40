"""Profiles on disk: the shipped ones, resolving a name or path, loading with validation, saving atomically.

Loading checks the contract (:mod:`specsim.profile_format`) and then that every entry's τ and histogram are
what its greedy traces replay to at its γ (:func:`check_traces_agree`): predictions use the traces first, so a
disagreement would silently ignore an edit.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from specsim.bounds import clip
from specsim.draft_shapes.adaptive import replay_at
from specsim.errors import SpecsimError
from specsim.jsonio import check_regular_file, read_json, show, write_json_atomic
from specsim.profile_format import TAU_TOLERANCE, Profile

PROFILES_DIR = Path(__file__).parent


def save_profile(profile: Profile, path: str | os.PathLike) -> Path:
    """Validate by round trip, then write atomically."""
    data = profile.to_json()
    check_traces_agree(Profile.from_json(json.loads(json.dumps(data))))
    return write_json_atomic(path, data)


def shipped_profiles() -> dict[str, Path]:
    """Name (file stem) -> path of every profile shipped inside the package."""
    return {p.stem: p for p in sorted(PROFILES_DIR.rglob("*.json"))}


DEFAULT_PROFILE = "ibed-llava1.5-7b-68m"


def resolve_profile_path(name_or_path: str) -> Path:
    """A shipped profile name, or a path to a JSON file."""
    shipped = shipped_profiles()
    if name_or_path in shipped:
        return shipped[name_or_path]
    if not str(name_or_path).strip():
        raise SpecsimError(
            f"profile: expected a shipped profile name or a path to a .json file, got {name_or_path!r}"
        )
    path = Path(name_or_path)
    if path.suffix == ".json" or os.path.lexists(path) or os.sep in name_or_path:
        return check_regular_file(path, "profile file")
    raise SpecsimError(
        f"unknown profile {clip(str(name_or_path), 60)!r} (expected a path to a .json file or a shipped "
        f"profile: 'specsim profiles' lists the {len(shipped)})"
    )


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Load and validate a profile by shipped name or path."""
    path = resolve_profile_path(name_or_path)
    data = read_json(path, "profile")
    try:
        profile = check_traces_agree(Profile.from_json(data))
    except SpecsimError as err:
        raise SpecsimError(f"profile {path.name}: {err}") from None
    if not profile.name:
        profile = replace(profile, name=path.stem)
    return profile


def check_traces_agree(profile: Profile) -> Profile:
    """``profile``, once every entry's τ and histogram agree with its greedy traces replayed at its γ (an
    adaptive ensemble's re-run block by block); SpecsimError naming the entry otherwise."""
    for i, entry in enumerate(profile.acceptance):
        where, gamma, traces = f"acceptance[{i}]", entry.gamma, entry.traces
        greedy = [t.match for t in traces]
        if gamma is None or not greedy or any(m is None for m in greedy) or not any(greedy):
            continue
        tau_replay, hist_replay = replay_at(traces, gamma)
        if entry.tau is not None and abs(entry.tau - tau_replay) > TAU_TOLERANCE:
            raise SpecsimError(
                f"{where}.tau: {entry.tau} disagrees with its traces, which replay to tau = "
                f"{tau_replay:.4f} at gamma={gamma} (expected within {TAU_TOLERANCE})"
            )
        hist = None if entry.accepted_histogram is None else [int(h) for h in entry.accepted_histogram]
        if hist is not None and [int(h) for h in hist_replay] != hist:
            raise SpecsimError(
                f"{where}.accepted_histogram: {show(hist)} disagrees with its traces, which replay "
                f"to {show([int(h) for h in hist_replay])} at gamma={gamma}"
            )
    return profile
