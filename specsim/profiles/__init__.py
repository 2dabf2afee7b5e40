"""The shipped profiles (``published/``: papers' tables, each row cited; ``measured/``: this project's runs)
and loading, resolving and saving profiles (:mod:`specsim.profiles.loading`). Import from here."""

from specsim.profiles.loading import (
    DEFAULT_PROFILE,
    PROFILES_DIR,
    check_traces_agree,
    load_profile,
    resolve_profile_path,
    save_profile,
    shipped_profiles,
)

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES_DIR",
    "check_traces_agree",
    "load_profile",
    "resolve_profile_path",
    "save_profile",
    "shipped_profiles",
]
