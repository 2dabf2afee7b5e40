"""The drafting kinds specsim prices: a separate draft model, EAGLE/EAGLE-3 heads, MTP heads, n-gram and
suffix lookup (``presets.json`` beside this module, each kind with its engines' names, source and preset).

A kind differs from another only in what a block's draft side costs: a ``model`` runs γ forwards of its
own; a ``head`` runs γ forwards of a head at the target's width (:mod:`.heads`); a ``lookup`` runs none and
pays a host lookup per sequence (:mod:`.ngram_lookup`). ``--draft-kind`` of ``hardware``, ``recommend`` and
``serve`` and a published row's ``draft_kind`` name one (aliases accepted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import check_schema_version, read_json

DEFAULT_KIND = "model"
DRAFTS_WITH = ("model", "head", "lookup")


@dataclass(frozen=True)
class DraftKind:
    """One drafting kind (module docstring); ``preset``: its shipped settings (heads by target id, γ, ...)."""

    name: str
    drafts_with: str
    description: str
    source: str
    aliases: tuple[str, ...] = ()
    engines: dict[str, str] = field(default_factory=dict)
    preset: dict = field(default_factory=dict)
    schema_version: int = 1

    @property
    def has_model(self) -> bool:
        """Whether a block runs draft forwards (a model or a head)."""
        return self.drafts_with != "lookup"

    @property
    def is_head(self) -> bool:
        return self.drafts_with == "head"

    def head_for(self, target_id: str) -> str | None:
        """The shipped head config this kind's preset names for a target (by hub id, any case)."""
        heads = {k.lower(): v for k, v in self.preset.get("heads", {}).items()}
        return heads.get(target_id.lower())

    def to_json(self) -> dict:
        return {
            "kind": self.name,
            "drafts_with": self.drafts_with,
            "aliases": list(self.aliases),
            "engines": dict(self.engines),
            "description": self.description,
            "preset": dict(self.preset),
            "source": self.source,
        }


@lru_cache(maxsize=1)
def draft_kinds() -> dict[str, DraftKind]:
    """Every shipped kind by name."""
    path = Path(str(resources.files("specsim") / "draft_kinds" / "presets.json"))
    data = read_json(path, "drafting kinds")
    check_schema_version(data, 1, "drafting kinds")
    out = {}
    for name, d in data["kinds"].items():
        if d["drafts_with"] not in DRAFTS_WITH:
            raise SpecsimError(f"drafting kinds.{name}.drafts_with: expected one of {DRAFTS_WITH}")
        out[name] = DraftKind(
            name,
            d["drafts_with"],
            d["description"],
            d["source"],
            tuple(d.get("aliases", ())),
            dict(d.get("engines", {})),
            dict(d.get("preset", {})),
        )
    return out


def draft_kind(name: str | None, where: str = "--draft-kind") -> DraftKind:
    """The kind named (or aliased) ``name``; None: a separate draft model. One line naming the kinds
    otherwise."""
    kinds = draft_kinds()
    if name is None:
        return kinds[DEFAULT_KIND]
    key = str(name).strip().lower()
    for kind in kinds.values():
        if key == kind.name or key in kind.aliases:
            return kind
    raise SpecsimError(f"{where}: expected one of {', '.join(kinds)} (or an alias), got {name!r}")


# An engine's name for a kind the registry does not name there: llama-server's --spec-type for a draft model.
DEFAULT_ENGINE_METHOD = {"vllm": "draft_model", "sglang": "STANDALONE", "llama.cpp": "draft-simple"}


def engine_method(engine: str, given: str | None, kind: DraftKind) -> tuple[str, str]:
    """(the method (vLLM) or algorithm (SGLang) name an engine config carries for ``kind``, a note): ``given``
    when it is one of that engine's names here, with a note when it names another kind than the one priced;
    one line naming the engine's names otherwise. Engines without names here (llama.cpp) take it as given."""
    own = kind.engines.get(engine) or DEFAULT_ENGINE_METHOD[engine]
    if given is None or given == own:
        return own, ""
    names = {k.engines[engine]: k.name for k in draft_kinds().values() if engine in k.engines}
    if not names:
        return given, ""
    if given not in names:
        raise SpecsimError(f"--engine-method: expected one of {engine}'s {', '.join(names)}, got {given!r}")
    other = names[given]
    return given, (
        f"--engine-method {given} is {engine}'s name for drafting kind {other!r}; the table prices kind "
        f"{kind.name!r} ({own}): give --draft-kind {other} to price the kind the config runs"
    )


def kind_rows() -> list[dict]:
    """``specsim hardware --list``'s drafting kinds: name, how it drafts, aliases, engines, description."""
    return [
        {
            "kind": k.name,
            "drafts_with": k.drafts_with,
            "aliases": list(k.aliases),
            "vllm": k.engines.get("vllm", ""),
            "sglang": k.engines.get("sglang", ""),
            "description": k.description,
            "source": k.source,
        }
        for k in draft_kinds().values()
    ]
