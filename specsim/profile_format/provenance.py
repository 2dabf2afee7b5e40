"""A profile's provenance: where its numbers come from (measured, or a cited publication)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys
from specsim.jsonio import (  # short local names: the profile modules read like the JSON they check
    drop_none as _drop_none,
)
from specsim.jsonio import (
    field_int as _int,
)
from specsim.jsonio import (
    field_opt as _opt,
)
from specsim.jsonio import (
    field_req as _req,
)
from specsim.jsonio import (
    field_str as _str,
)
from specsim.jsonio import (
    show as _show,
)


@dataclass(frozen=True)
class Provenance:
    """Where a profile's numbers come from; ``source`` is ``measured`` or ``published: <citation>``."""

    target: str
    draft: str
    device: str
    dtype: str
    date: str
    source: str
    software: dict[str, str] = field(default_factory=dict)
    weights: str = "real"  # "real" | "random" (architecture-only latency) | "n/a" (published)
    threads: int | None = None
    notes: str = ""

    def to_json(self) -> dict:
        return _drop_none(
            {
                "target": self.target,
                "draft": self.draft,
                "device": self.device,
                "dtype": self.dtype,
                "date": self.date,
                "source": self.source,
                "software": dict(self.software),
                "weights": self.weights,
                "threads": self.threads,
                "notes": self.notes,
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str = "provenance") -> Provenance:
        check_keys(
            d if isinstance(d, dict) else {},
            {
                "target",
                "draft",
                "device",
                "dtype",
                "date",
                "source",
                "software",
                "weights",
                "threads",
                "notes",
            },
            where,
        )
        source = _str(_req(d, "source", where), f"{where}.source")
        if source != "measured" and not source.startswith("published: "):
            raise SpecsimError(
                f"{where}.source: expected 'measured' or 'published: <citation>', got {source!r}"
            )
        software = d.get("software", {})
        if not isinstance(software, dict) or not all(isinstance(v, str) for v in software.values()):
            raise SpecsimError(
                f"{where}.software: expected an object of name -> version strings, got {_show(software)}"
            )
        weights = d.get("weights", "real")
        if weights not in ("real", "random", "n/a"):
            raise SpecsimError(f"{where}.weights: expected 'real', 'random' or 'n/a', got {_show(weights)}")
        return cls(
            target=_str(_req(d, "target", where), f"{where}.target"),
            draft=_str(_req(d, "draft", where), f"{where}.draft"),
            device=_str(_req(d, "device", where), f"{where}.device"),
            dtype=_str(_req(d, "dtype", where), f"{where}.dtype"),
            date=_str(_req(d, "date", where), f"{where}.date"),
            source=source,
            software=dict(software),
            weights=weights,
            threads=_opt(d, "threads", lambda v, w: _int(v, w, lo=1, unit="threads"), where),
            notes=_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
        )
