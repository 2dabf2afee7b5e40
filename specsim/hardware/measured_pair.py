"""Which models a profile was measured on, so that its costs and τ travel with them.

The pair whose shipped profiles list it (``pairs.json``: ``profile`` and ``profiles``), else the models its
provenance names, resolved by :func:`specsim.hardware.model_resolution.load_model_spec` (the zoo's are
presets named by their ``_specsim.ids``). A cost profile prices those models only: naming others is refused
(:func:`models_for_costs`); a τ of another pair may be borrowed, with a note (:func:`other_pair_note`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specsim.errors import SpecsimError
from specsim.hardware.model import ModelSpec
from specsim.hardware.model_resolution import load_model_spec
from specsim.presets import pair_models, profile_pair
from specsim.profile_format import Profile


@dataclass(frozen=True)
class MeasuredPair:
    """A profile's pair (None: not a named pair) and the names of its target and draft."""

    profile: str
    pair: str | None
    target: str
    draft: str

    @classmethod
    def of(cls, profile: Profile) -> MeasuredPair:
        pair = profile_pair(profile.name)
        names = pair_models(pair) if pair else (profile.provenance.target, profile.provenance.draft)
        return cls(profile.name, pair, *names)

    def describe(self) -> str:
        return f"{self.target} / {self.draft}" + (f" (pair {self.pair})" if self.pair else "")

    def specs(self, **kw) -> tuple[ModelSpec, ModelSpec] | None:
        """(target, draft) sized from their configs; None when either is not a preset, shipped id or
        config file. ``kw``: ``dtype``/``kv_dtype``/``image_size`` for :func:`load_model_spec`."""
        try:
            return load_model_spec(self.target, **kw), load_model_spec(self.draft, **kw)
        except SpecsimError:
            return None


def same_architecture(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two specs are one architecture (names and dtypes aside)."""
    strip = {"name": "", "dtype_bytes": 0, "kv_bytes": None}
    return replace(a, **strip) == replace(b, **strip)


def models_for_costs(profile: Profile, flag: str, named, **kw) -> tuple[str | None, ModelSpec, ModelSpec]:
    """(pair, target, draft) a cost profile prices: its own models. ``named``: the (pair, target, draft)
    resolved from --pair/--target/--draft, or None when none was given; SpecsimError naming ``flag`` when
    they are other models, or when the profile's own cannot be sized and none were named."""
    try:
        profile.latency.forward_costs()  # before the models: without timings nothing here prices a pass
    except SpecsimError as err:
        raise SpecsimError(f"{flag}: profile {profile.name!r}: {err}") from None
    measured = MeasuredPair.of(profile)
    own = measured.specs(**kw)
    if named is None:
        if own is None:
            raise SpecsimError(
                f"{flag}: profile {profile.name!r} was measured with {measured.describe()}, which are not "
                "presets, shipped model ids or config files; pass --pair NAME or --target/--draft for them"
            )
        return measured.pair, *own
    if own is not None and not all(map(same_architecture, own, named[1:])):
        raise SpecsimError(
            f"{flag}: profile {profile.name!r} measured {measured.describe()}, not {named[1].name} / "
            f"{named[2].name}: its costs are those models' (drop --pair/--target/--draft to price them)"
        )
    return named


def other_pair_note(profile: Profile, target: ModelSpec, draft: ModelSpec) -> str | None:
    """A note when ``profile``'s acceptance was measured on other models than ``target``/``draft`` (None:
    the same, or the profile's models cannot be sized to tell)."""
    measured = MeasuredPair.of(profile)
    own = measured.specs()
    same_draft = draft is not None and same_architecture(own[1], draft) if own else False
    if own is None or (same_architecture(own[0], target) and same_draft):
        return None
    drafted = "no draft model" if draft is None else draft.name
    return (
        f"acceptance of profile {profile.name} was measured on {measured.describe()}, not on {target.name} / "
        f"{drafted}: its tau is borrowed"
    )
