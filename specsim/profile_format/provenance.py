"""A profile's provenance: where its numbers come from (measured, or a cited publication)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, drop_none, field_int, field_opt, field_req, field_str, show


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
        return drop_none(
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
        source = field_str(field_req(d, "source", where), f"{where}.source")
        if source != "measured" and not source.startswith("published: "):
            raise SpecsimError(
                f"{where}.source: expected 'measured' or 'published: <citation>', got {source!r}"
            )
        software = d.get("software", {})
        if not isinstance(software, dict) or not all(isinstance(v, str) for v in software.values()):
            raise SpecsimError(
                f"{where}.software: expected an object of name -> version strings, got {show(software)}"
            )
        weights = d.get("weights", "real")
        if weights not in ("real", "random", "n/a"):
            raise SpecsimError(f"{where}.weights: expected 'real', 'random' or 'n/a', got {show(weights)}")
        return cls(
            target=field_str(field_req(d, "target", where), f"{where}.target"),
            draft=field_str(field_req(d, "draft", where), f"{where}.draft"),
            device=field_str(field_req(d, "device", where), f"{where}.device"),
            dtype=field_str(field_req(d, "dtype", where), f"{where}.dtype"),
            date=field_str(field_req(d, "date", where), f"{where}.date"),
            source=source,
            software=dict(software),
            weights=weights,
            threads=field_opt(d, "threads", lambda v, w: field_int(v, w, lo=1, unit="threads"), where),
            notes=field_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
        )
