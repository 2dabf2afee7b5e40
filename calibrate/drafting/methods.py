"""Drafting methods by code: :class:`Method` is parsed once from a code and knows its members, costs and
drafter.

Codes: ``plain`` (a text pair's :class:`calibrate.drafting.text_drafter.TextDrafter`); for VLM targets the
members ``M``, ``T``, ``C``, ``F``, ``Z``, ``Pn``, alone or as in-batch ensembles (``MT``, ``MTCP4``),
optionally ``adaptive:``; long names (``multimodal``, ``pooled(n)``, ...) for single members. Cost fields
are what :mod:`specsim.predict.pricing` charges a method. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from calibrate.drafting.contexts import (
    CaptionContext,
    MultimodalContext,
    TargetFeaturesContext,
    TextOnlyContext,
    ZeroRowsContext,
)
from calibrate.drafting.ensemble import AdaptiveEnsembleDrafter, EnsembleDrafter
from calibrate.drafting.text_drafter import PLAIN, TextDrafter
from calibrate.run.engine import unwrap
from specsim.errors import SpecsimError
from specsim.profile_format import ADAPTIVE_PREFIX

_CODE_RE = re.compile(r"M|T|C|F|Z|P(\d+)")
_NAMES = {"multimodal": "M", "text-only": "T", "caption": "C", "target-features": "F", "zero-rows": "Z"}


@dataclass(frozen=True)
class MemberSpec:
    """One ensemble member: ``kind`` in M/T/C/F/Z/P and ``pool_tokens`` (P only)."""

    kind: str
    pool_tokens: int | None = None

    @property
    def code(self) -> str:
        return f"P{self.pool_tokens}" if self.kind == "P" else self.kind


@dataclass(frozen=True)
class Method:
    """A drafting method: canonical ``code`` ('M', 'P4', 'adaptive:MTC', 'plain'), its ``members`` (none for
    plain) and whether the ensemble weights are ``adaptive``. Build one with :meth:`parse`."""

    code: str
    members: tuple[MemberSpec, ...] = ()
    adaptive: bool = False

    @classmethod
    def parse(cls, code: str | Method) -> Method:
        """'multimodal' -> M, 'pooled(4)' -> P4, 'adaptive:MTC', 'plain', ...; SpecsimError naming the bad
        code."""
        if isinstance(code, Method):
            return code
        text = str(code)
        if any(c.isspace() or not c.isprintable() for c in text):
            raise SpecsimError(
                f"--method: expected a method code without spaces, newlines or control characters (such "
                f"as M, MTC or adaptive:MTC), got {text!r}"
            )
        if text == PLAIN:
            return cls(PLAIN)
        adaptive = text.startswith(ADAPTIVE_PREFIX)
        body = text.removeprefix(ADAPTIVE_PREFIX)
        body = _NAMES.get(body, body)
        body = re.sub(r"^pooled\((\d+)\)$", r"P\1", body)
        specs, pos = [], 0
        for m in _CODE_RE.finditer(body):
            if m.start() != pos:
                break
            specs.append(MemberSpec("P", int(m.group(1))) if m.group(1) else MemberSpec(m.group(0)))
            pos = m.end()
        if not specs or pos != len(body) or any(s.kind == "P" and s.pool_tokens < 1 for s in specs):
            raise SpecsimError(
                f"--method: expected plain (text pairs) or codes like M, T, C, F, Z, P144, MT, MTCP or "
                f"adaptive:MTC (or multimodal, text-only, caption, target-features, zero-rows, pooled(N)), "
                f"got {code!r}"
            )
        pools = [s.pool_tokens for s in specs if s.kind == "P"]
        pooled = [n for n in pools if math.isqrt(n) ** 2 != n]
        if pooled:  # pooling averages a square patch grid to a square one: known before any model loads
            raise SpecsimError(
                f"--method {code!r}: pooled(n) takes n a square number (4, 16, 144, ...), got {pooled[0]}"
            )
        return cls(
            (ADAPTIVE_PREFIX if adaptive else "") + "".join(s.code for s in specs), tuple(specs), adaptive
        )

    def __str__(self) -> str:
        return self.code

    @property
    def plain(self) -> bool:
        """The text drafter of a text pair (no members)."""
        return not self.members

    @property
    def draft_batch_size(self) -> int:
        """Draft contexts one draft step runs: one per ensemble member (1 for plain)."""
        return max(len(self.members), 1)

    @property
    def needs_captioner(self) -> bool:
        """True when a member is C (caption drafting)."""
        return any(s.kind == "C" for s in self.members)

    def costs(self, images_per_prompt: int) -> dict[str, Any]:
        """Cost fields of :class:`specsim.profile_format.MethodAcceptance` on prompts with that many
        images."""
        if self.plain:
            return {"draft_batch_size": 1}
        kinds = [s.kind for s in self.members]
        k = len(kinds)
        return {
            "draft_batch_size": k,
            "uses_draft_vision": bool(images_per_prompt) and any(c in ("M", "P") for c in kinds),
            "captions_per_prompt": images_per_prompt if "C" in kinds else 0,
            "weights": tuple(1.0 / k for _ in kinds) if k > 1 else None,
        }

    def make_drafter(self, target, draft, *, captioner=None, caption_prefix: str = "Image: ", device="cpu"):
        """A fresh drafter over loaded ``target``/``draft``
        (:class:`calibrate.models.loaded_model.LoadedModel`)."""
        return make_drafter(
            self,
            draft.model,
            tokenizer=draft.tokenizer or target.tokenizer,
            captioner=captioner,
            caption_prefix=caption_prefix,
            device=device,
            target=target.model,
            image_processor=getattr(draft.processor, "image_processor", None),
        )


def make_drafter(
    method: str | Method,
    draft,
    *,
    tokenizer=None,
    captioner=None,
    caption_prefix: str = "Image: ",
    weights=None,
    image_processor=None,
    device="cpu",
    eta: float = 2.0,
    target=None,
):
    """A drafter for a method (code or :class:`Method`) over a bare ``draft`` model.

    ``tokenizer`` re-encodes T/C prompts (T falls back to swapping image-token runs for "\\n" ids
    without it); ``captioner`` maps a PIL image to text (C); ``image_processor`` makes the draft's
    pixel values when the target's do not fit its vision tower; ``weights`` one per member (default equal);
    ``target`` the target VLM whose vision features F (target-features) reuses.
    """
    m = Method.parse(method)
    if m.plain:
        return TextDrafter(draft, device=device)
    members = []
    for s in m.members:
        if s.kind in ("M", "P"):
            members.append(MultimodalContext(pool_tokens=s.pool_tokens, image_processor=image_processor))
        elif s.kind == "T":
            members.append(TextOnlyContext(tokenizer=tokenizer))
        elif s.kind == "Z":
            members.append(ZeroRowsContext())
        elif s.kind == "F":
            if target is None or not hasattr(unwrap(target), "get_image_features"):
                raise SpecsimError(
                    f"method {m.code!r}: target-features drafting needs the target VLM (target=)"
                )
            members.append(TargetFeaturesContext(target=unwrap(target)))
        else:
            if captioner is None or tokenizer is None:
                raise SpecsimError(f"method {m.code!r}: caption drafting needs a captioner and a tokenizer")
            members.append(CaptionContext(captioner=captioner, tokenizer=tokenizer, prefix=caption_prefix))
    if any(s.kind in ("M", "P", "F") for s in m.members) and not hasattr(unwrap(draft), "get_image_features"):
        raise SpecsimError(f"method {m.code!r}: multimodal/pooled drafting needs a VLM draft; use T or C")
    if m.adaptive:
        return AdaptiveEnsembleDrafter(draft, members, weights=weights, device=device, eta=eta)
    return EnsembleDrafter(draft, members, weights=weights, device=device)
