"""Drafting methods for the calibration commands: canonical names, drafters, captioners and cost fields.

``plain`` is the text drafter of a text-only pair (:class:`calibrate.drafting.TextDrafter`); every other
name is a multimodal method code parsed by :func:`calibrate.drafters.parse_method` (M, T, C, F, Pn,
ensembles such as MT or MTCP4, ``adaptive:MTC``). Cost fields are what :mod:`specsim.e2e` charges a
method: draft batch size (ensemble members), draft vision encoder, captions per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specsim.errors import SpecsimError

PLAIN = "plain"


def canonical_method(method: str) -> str:
    """'multimodal' -> 'M', 'pooled(4)' -> 'P4', 'adaptive:MTC' stays; 'plain' stays; errors otherwise."""
    from calibrate.drafters import parse_method

    if method == PLAIN:
        return PLAIN
    adaptive, specs = parse_method(method)
    return ("adaptive:" if adaptive else "") + "".join(s.code for s in specs)


def method_costs(method: str, images_per_prompt: int) -> dict[str, Any]:
    """Cost fields of :class:`specsim.profile.MethodAcceptance` for ``method`` on prompts with that many images."""
    from calibrate.drafters import parse_method

    if method == PLAIN:
        return {"draft_batch_size": 1}
    _, specs = parse_method(method)
    kinds = [s.kind for s in specs]
    return {"draft_batch_size": len(specs),
            "uses_draft_vision": bool(images_per_prompt) and any(k in ("M", "P") for k in kinds),
            "captions_per_prompt": images_per_prompt if "C" in kinds else 0,
            "weights": tuple(1.0 / len(specs) for _ in specs) if len(specs) > 1 else None}


@dataclass
class CachedCaptioner:
    """Captions each distinct image once (keyed by its pixels): methods that share C do not re-caption.

    Only acceptance uses the cache; caption time is measured by ``specsim calibrate latency``.
    """

    captioner: Any
    cache: dict = field(default_factory=dict)

    def __call__(self, image) -> str:
        key = (getattr(image, "size", None), image.tobytes() if hasattr(image, "tobytes") else id(image))
        if key not in self.cache:
            self.cache[key] = self.captioner(image)
        return self.cache[key]


def hf_captioner(loaded, prompt: str | None = None, max_new_tokens: int = 24):
    """An :class:`calibrate.draft_contexts.HFCaptioner` over a loaded captioner VLM (LLaVA-style prompt)."""
    from calibrate.draft_contexts import HFCaptioner
    from calibrate.zoo.task import CAPTION_PROMPT

    if loaded.processor is None:
        raise SpecsimError(f"captioner {loaded.name!r} has no processor (expected a VLM folder with "
                           "preprocessor and tokenizer files)")
    return HFCaptioner(loaded.model, loaded.processor, prompt=CAPTION_PROMPT if prompt is None else prompt,
                       max_new_tokens=max_new_tokens)


def needs_captioner(methods: list[str]) -> bool:
    from calibrate.drafters import parse_method

    return any(m != PLAIN and any(s.kind == "C" for s in parse_method(m)[1]) for m in methods)


def make_method_drafter(method: str, target, draft, *, captioner=None, caption_prefix: str = "Image: ",
                        device="cpu"):
    """A fresh drafter for ``method`` over loaded ``target``/``draft`` (:class:`calibrate.models.LoadedModel`)."""
    from calibrate.drafters import make_drafter
    from calibrate.drafting import TextDrafter

    if method == PLAIN:
        return TextDrafter(draft)
    tokenizer = draft.tokenizer or target.tokenizer
    image_processor = getattr(draft.processor, "image_processor", None)
    return make_drafter(method, draft.model, tokenizer=tokenizer, captioner=captioner,
                        caption_prefix=caption_prefix, image_processor=image_processor, device=device,
                        target=target.model)
