"""The profile: the versioned JSON contract between ``calibrate`` (writes) and ``specsim`` (reads).

A profile holds provenance, latency tables (ms), acceptance per drafting method and scenario, and
the results of ``specsim check``. Every dataclass here is frozen and has ``to_json``/``from_json``;
``from_json`` validates every field and raises :class:`SpecsimError` naming the field and the bad
value (ranges per unit from :mod:`specsim.bounds`). The contract is a leaf: it imports
nothing of specsim but :mod:`specsim.jsonio`, :mod:`specsim.errors`, :mod:`specsim.bounds` and
:mod:`specsim.dtypes`. Profiles on disk (shipped, loaded, saved, their traces replayed against their τ)
are :mod:`specsim.profiles`.

One module per part of the document: :mod:`~specsim.profile_format.provenance`,
:mod:`~specsim.profile_format.latency_section`,
:mod:`~specsim.profile_format.trace`, :mod:`~specsim.profile_format.acceptance_entry`,
:mod:`~specsim.profile_format.check_row`, :mod:`~specsim.profile_format.serve_check_row`,
:mod:`~specsim.profile_format.document` (the whole). Import from here.
"""

from specsim.profile_format.acceptance_entry import ADAPTIVE_PREFIX, TAU_TOLERANCE, MethodAcceptance
from specsim.profile_format.check_row import CheckRow
from specsim.profile_format.document import SCHEMA_VERSION, SCHEMA_VERSIONS, Profile
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
