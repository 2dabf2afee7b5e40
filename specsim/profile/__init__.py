"""The profile: the versioned JSON contract between ``calibrate`` (writes) and ``specsim`` (reads).

A profile holds provenance, latency tables (ms), acceptance per drafting method and scenario, and
the results of ``specsim check``. Every dataclass here is frozen and has ``to_json``/``from_json``;
``from_json`` validates every field and raises :class:`SpecsimError` naming the field and the bad
value (ranges per unit from :mod:`specsim.bounds`). :func:`save_profile` writes atomically
(temp file + rename, :mod:`specsim.jsonio`).

One module per part of the document: :mod:`~specsim.profile.provenance`, :mod:`~specsim.profile.latency`,
:mod:`~specsim.profile.trace`, :mod:`~specsim.profile.acceptance`, :mod:`~specsim.profile.checks`,
:mod:`~specsim.profile.document` (the whole) and :mod:`~specsim.profile.files` (disk). Import from here.
"""

from specsim.profile.acceptance import ADAPTIVE_PREFIX, TAU_TOLERANCE, MethodAcceptance
from specsim.profile.checks import CheckRow
from specsim.profile.document import SCHEMA_VERSION, SCHEMA_VERSIONS, Profile
from specsim.profile.files import (
    DEFAULT_PROFILE,
    PROFILES_DIR,
    load_profile,
    resolve_profile_path,
    save_profile,
    shipped_profiles,
)
from specsim.profile.latency import BlockCost, Curve, LatencySection
from specsim.profile.provenance import Provenance
from specsim.profile.trace import Trace

__all__ = [
    "ADAPTIVE_PREFIX", "DEFAULT_PROFILE", "PROFILES_DIR", "SCHEMA_VERSION", "SCHEMA_VERSIONS", "TAU_TOLERANCE",
    "BlockCost", "CheckRow", "Curve", "LatencySection", "MethodAcceptance", "Profile", "Provenance", "Trace",
    "load_profile", "resolve_profile_path", "save_profile", "shipped_profiles",
]
