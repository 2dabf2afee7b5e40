"""The whole profile document: schema version, provenance, latency, acceptance entries and checks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, few, field_list, field_req, field_str, show
from specsim.profile_format.acceptance_entry import MethodAcceptance
from specsim.profile_format.check_row import CheckRow
from specsim.profile_format.latency_section import LatencySection
from specsim.profile_format.provenance import Provenance
from specsim.profile_format.serve_check_row import ServeCheckRow

SCHEMA_VERSION = 3
# Schema 1: latency as 1-D tables only. Schema 2 adds ``latency.cost_model`` (forward cost over rows ×
# context × batch, :mod:`specsim.profile_format.cost_model`) and per-trace prompt lengths. Schema 3 adds the
# batched engine's cost (``latency.cost_model.batched``), check rows at a batch (``checks[].batch``) and
# serving check rows (``serve_checks``, optional).
# Older files load.
SCHEMA_VERSIONS = (1, 2, 3)
WHAT_IF_SCENARIO = "what-if"  # an entry a user adds for any scenario (``--alpha``): no --scenario drops it


@dataclass(frozen=True)
class Profile:
    """A whole profile: provenance, latency, acceptance entries and check results."""

    provenance: Provenance
    latency: LatencySection = field(default_factory=LatencySection)
    acceptance: tuple[MethodAcceptance, ...] = ()
    checks: tuple[CheckRow, ...] = ()
    serve_checks: tuple[ServeCheckRow, ...] = ()
    name: str = ""
    description: str = ""
    schema_version: int = SCHEMA_VERSION  # as loaded (1, 2 or 3)

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,  # older content is valid schema 3: files are written as 3
            "name": self.name,
            "description": self.description,
            "provenance": self.provenance.to_json(),
            "latency": self.latency.to_json(),
            "acceptance": [a.to_json() for a in self.acceptance],
            "checks": [c.to_json() for c in self.checks],
        } | ({"serve_checks": [c.to_json() for c in self.serve_checks]} if self.serve_checks else {})

    @classmethod
    def from_json(cls, d: dict) -> Profile:
        if not isinstance(d, dict):
            raise SpecsimError(f"profile: expected a JSON object, got {show(d)}")
        check_keys(
            d,
            {"schema_version", "name", "description", "provenance", "latency", "acceptance", "checks"}
            | {"serve_checks"},
            "profile",
        )
        version = field_req(d, "schema_version", "profile")
        if isinstance(version, bool) or not isinstance(version, int) or version not in SCHEMA_VERSIONS:
            raise SpecsimError(
                f"profile.schema_version: expected one of {list(SCHEMA_VERSIONS)}, got {show(version)}"
            )
        acceptance = tuple(
            MethodAcceptance.from_json(a, f"acceptance[{i}]")
            for i, a in enumerate(field_list(d.get("acceptance", []), "acceptance", nonempty=False))
        )
        seen: set[tuple[str, str]] = set()
        for i, a in enumerate(acceptance):
            if (a.method, a.scenario) in seen:
                raise SpecsimError(
                    f"acceptance[{i}]: duplicate entry for method {a.method!r} in scenario {a.scenario!r}"
                )
            seen.add((a.method, a.scenario))
        check_scenario_images(acceptance)
        return cls(
            provenance=Provenance.from_json(field_req(d, "provenance", "profile")),
            latency=LatencySection.from_json(d.get("latency", {})),
            acceptance=acceptance,
            checks=tuple(
                CheckRow.from_json(c, f"checks[{i}]")
                for i, c in enumerate(field_list(d.get("checks", []), "checks", nonempty=False))
            ),
            serve_checks=tuple(
                ServeCheckRow.from_json(c, f"serve_checks[{i}]")
                for i, c in enumerate(field_list(d.get("serve_checks", []), "serve_checks", nonempty=False))
            ),
            name=field_str(d.get("name", ""), "profile.name", allow_empty=True),
            description=field_str(d.get("description", ""), "profile.description", allow_empty=True),
            schema_version=version,
        )

    def select_entries(self, methods=None, scenario: str | None = None) -> list[MethodAcceptance]:
        """The acceptance entries for ``methods`` (None: all) in ``scenario`` (a name, or an 'Nimg' group),
        by images per prompt, then in the profile's scenario order."""
        entries = list(self.acceptance)
        if not entries:
            raise SpecsimError(f"profile {self.name!r} has no acceptance entries")
        if methods:
            known = list(dict.fromkeys(e.method for e in entries))
            for m in methods:
                if m not in known:
                    raise SpecsimError(f"unknown method {m!r} (this profile has: {', '.join(known)})")
            entries = [e for e in entries if e.method in methods]
        if scenario is not None:
            matched = [e for e in entries if _scenario_matches(e, scenario)]
            entries = matched + [e for e in entries if e.scenario == WHAT_IF_SCENARIO and e not in matched]
            if not matched:
                known = list(dict.fromkeys(e.scenario for e in self.acceptance))
                groups = sorted({f"{e.images_per_prompt}img" for e in self.acceptance})
                raise SpecsimError(
                    f"unknown scenario {scenario!r} (expected one of: {', '.join(known + groups)})"
                )
        order = {name: i for i, name in enumerate(dict.fromkeys(e.scenario for e in self.acceptance))}
        return sorted(entries, key=lambda e: (e.images_per_prompt, order[e.scenario]))

    def one_entry(
        self, method: str | None, scenario: str | None, hint: str = "pass --method and --scenario"
    ) -> MethodAcceptance:
        """The one acceptance entry of ``method`` in ``scenario`` (either None: any); SpecsimError naming the
        entries found when there are several, and ``hint``: how to pick one."""
        entries = self.select_entries([method] if method else None, scenario)
        if len(entries) != 1:
            shown = few(f"{e.method}/{e.scenario}" for e in entries)
            if method and scenario:  # both given: the scenario is a group ('5img')
                hint = f"--scenario {scenario} names a group of scenarios: give one of them"
            raise SpecsimError(
                f"profile {self.name!r}: expected one acceptance entry, found {len(entries)} "
                f"({shown}); {hint}"
            )
        return entries[0]

    def with_acceptance(self, entries: tuple[MethodAcceptance, ...] | list[MethodAcceptance]) -> Profile:
        """A copy where ``entries`` replace any existing entry of the same (method, scenario)."""
        key = lambda e: (e.method, e.scenario)  # noqa: E731
        acceptance = _replaced(self.acceptance, entries, key)
        check_scenario_images(acceptance)
        return replace(self, acceptance=acceptance)

    def with_checks(self, rows: tuple[CheckRow, ...] | list[CheckRow]) -> Profile:
        """A copy where ``rows`` replace existing rows of the same (method, scenario, gamma, draft,
        temperature, batch, synthetic acceptance, runtime)."""
        key = lambda r: (  # noqa: E731
            r.method, r.scenario, r.gamma, r.draft, r.temperature, r.batch, r.synthetic_acceptance, r.runtime
        )  # fmt: skip
        return replace(self, checks=_replaced(self.checks, rows, key))

    def with_serve_checks(self, rows: tuple[ServeCheckRow, ...] | list[ServeCheckRow]) -> Profile:
        """A copy where ``rows`` replace existing serving rows of the same (method, scenario, gamma, rate,
        synthetic acceptance, runtime)."""
        key = lambda r: (r.method, r.scenario, r.gamma, r.rate_per_s, r.synthetic_acceptance, r.runtime)  # noqa: E731
        return replace(self, serve_checks=_replaced(self.serve_checks, rows, key))


def _replaced(old: tuple, new, key) -> tuple:
    """``old`` without the items whose ``key`` one of ``new`` has, then ``new`` (in order)."""
    keys = {key(x) for x in new}
    return tuple(x for x in old if key(x) not in keys) + tuple(new)


def _scenario_matches(entry: MethodAcceptance, scenario: str) -> bool:
    s = scenario.strip().lower()
    return s == entry.scenario.lower() or s in (
        f"{entry.images_per_prompt}img",
        f"{entry.images_per_prompt}-image",
    )


def check_scenario_images(acceptance) -> None:
    """One scenario is one workload: every entry of it has the same images per prompt (predict groups rows
    by scenario and prices each with its entry's images); SpecsimError naming both counts."""
    first: dict[str, MethodAcceptance] = {}
    for a in acceptance:
        b = first.setdefault(a.scenario, a)
        if b.images_per_prompt != a.images_per_prompt:
            raise SpecsimError(
                f"scenario {a.scenario!r}: method {a.method!r} has {a.images_per_prompt} images per prompt, "
                f"method {b.method!r} {b.images_per_prompt}; one scenario is one workload (give the entry "
                "the scenario's images per prompt, or another scenario name)"
            )
