"""Profiles on disk: the shipped ones, resolving a name or path, loading with validation, saving atomically."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import check_regular_file, read_json, write_json_atomic
from specsim.profile.document import Profile

PROFILES_DIR = Path(__file__).parent.parent / "profiles"


def save_profile(profile: Profile, path: str | os.PathLike) -> Path:
    """Validate by round trip, then write atomically."""
    data = profile.to_json()
    Profile.from_json(json.loads(json.dumps(data)))
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
        raise SpecsimError(f"profile: expected a shipped profile name or a path to a .json file, got {name_or_path!r}")
    path = Path(name_or_path)
    if path.suffix == ".json" or os.path.lexists(path) or os.sep in name_or_path:
        return check_regular_file(path, "profile file")
    raise SpecsimError(f"unknown profile {name_or_path!r} (expected a path to a .json file or one of: "
                       f"{', '.join(shipped) or 'none shipped'})")


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Load and validate a profile by shipped name or path."""
    path = resolve_profile_path(name_or_path)
    data = read_json(path, "profile")
    try:
        profile = Profile.from_json(data)
    except SpecsimError as err:
        raise SpecsimError(f"profile {path.name}: {err}") from None
    if not profile.name:
        profile = replace(profile, name=path.stem)
    return profile
