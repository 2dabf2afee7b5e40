"""The profile: the versioned JSON contract between ``calibrate`` (writes) and ``specsim`` (reads).

Provenance, latency (ms), acceptance per drafting method and scenario, and ``specsim check`` results, one
module per part (:mod:`~specsim.profile_format.document` is the whole). Every dataclass is frozen with
``to_json``/``from_json``; ``from_json`` validates every field and raises
:class:`specsim.errors.SpecsimError` naming the field and the bad value. A leaf: of specsim it imports only
jsonio, errors, bounds and dtypes. Profiles on disk: :mod:`specsim.profiles`. Import from here.
More: ARCHITECTURE.md, Notes by module.
"""

from specsim.profile_format.acceptance_entry import ADAPTIVE_PREFIX, TAU_TOLERANCE, MethodAcceptance
from specsim.profile_format.check_row import CheckRow
from specsim.profile_format.document import SCHEMA_VERSION, SCHEMA_VERSIONS, WHAT_IF_SCENARIO, Profile
from specsim.profile_format.latency_section import BlockCost, Curve, LatencySection
from specsim.profile_format.provenance import Provenance
from specsim.profile_format.serve_check_row import SERVE_METRICS, ServeCheckRow
from specsim.profile_format.trace import Trace

__all__ = [
    "ADAPTIVE_PREFIX",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "SERVE_METRICS",
    "TAU_TOLERANCE",
    "WHAT_IF_SCENARIO",
    "BlockCost",
    "CheckRow",
    "Curve",
    "LatencySection",
    "MethodAcceptance",
    "Profile",
    "Provenance",
    "ServeCheckRow",
    "Trace",
]
