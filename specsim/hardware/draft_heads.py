"""The draft side of a drafting kind as a :class:`~specsim.hardware.model.ModelSpec` the roofline prices.

``model``: the draft model as resolved; ``eagle`` (EAGLE-1/2), ``eagle3``, ``mtp``: the head's decoder layer
with an LM head and ``extra_weights`` (its fc or projection, in h × h blocks); ``ngram``/``suffix``: None
(no model). A head's input embedding is the target's (a gather). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import replace

from specsim.draft_kinds.registry import DraftKind, draft_kinds
from specsim.errors import SpecsimError, warn
from specsim.hardware.model import ModelSpec
from specsim.hardware.model_resolution import find_shipped, load_model_spec, model_config


def _qkv_width(m: ModelSpec) -> int:
    return m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim


def head_spec(kind: DraftKind, head: ModelSpec, target: ModelSpec, config: dict | None = None) -> ModelSpec:
    """The head's spec as the kind runs it (module docstring); ``config``: the head's config dict."""
    h = head.hidden
    if h != target.hidden:
        raise SpecsimError(
            f"--draft: a {kind.name} head runs at the target's width ({target.hidden}), got {head.name!r} "
            f"of hidden size {h}"
        )
    base = replace(head, tie_word_embeddings=True, vision=None)
    if kind.name == "eagle":
        return replace(base, vocab=target.vocab, extra_weights=2 * h * h)
    if kind.name == "eagle3":
        vocab = int((config or {}).get("draft_vocab_size") or head.vocab)
        return replace(base, vocab=vocab, extra_weights=3 * h * h + h * _qkv_width(head))
    return replace(base, vocab=target.vocab, extra_weights=2 * h * h)  # mtp


def mtp_head(target: ModelSpec) -> ModelSpec:
    """One MTP module of the target's own shape (DeepSeek-V3's: a decoder layer and a 2·h → h projection)."""
    moe = None if target.moe is None else replace(target.moe, layers=1)  # DeepSeek-V3's MTP layer routes too
    base = replace(
        target, name=f"{target.name} MTP head", layers=1, vision=None, tie_word_embeddings=True, moe=moe,
        window=None, window_layers=0,
    )  # fmt: skip
    return replace(base, extra_weights=2 * target.hidden * target.hidden)


# Vocabulary sizes of one tokenizer differ by the embedding's padding at most (Qwen2.5-VL-3B 151936 against
# -7B 152064: 0.08 %); a larger gap is another tokenizer (Llama-3's 128256 against Qwen3's 151936).
VOCAB_PADDING = 0.01


def draft_side(
    kind: DraftKind, target: ModelSpec, draft: str | None, *, dtype=None, kv_dtype=None, image_size=None
) -> ModelSpec | None:
    """The ModelSpec a block's draft forwards run for ``kind`` (None for a lookup kind); ``draft`` names the
    draft model or head (a head defaults to the kind's preset for the target)."""
    if not kind.has_model:
        if draft:
            raise SpecsimError(f"--draft: drafting kind {kind.name!r} uses no model, got --draft {draft!r}")
        return None
    if kind.name == "mtp" and not draft:
        return mtp_head(target if dtype is None else target.with_dtype(dtype, kv_dtype))
    shipped = find_shipped(target.name)
    name = draft or (kind.head_for(shipped[1].id if shipped else target.name) if kind.is_head else None)
    if not name:
        raise SpecsimError(
            f"--draft: drafting kind {kind.name!r} needs a draft {'head' if kind.is_head else 'model'} "
            "named: a model id, folder or config"
            + (f" (no {kind.name} head ships for {target.name!r})" if kind.is_head else "")
        )
    refuse_another_kinds_head(kind, name)
    kw = {"dtype": dtype, "kv_dtype": kv_dtype, "image_size": image_size}
    spec = load_model_spec(name, **kw)
    if not kind.is_head and spec.text_params > target.text_params:
        warn(f"--draft: {spec.name} is larger than the target {target.name}; is the pair the wrong way round")
    if not kind.is_head and abs(spec.vocab - target.vocab) > VOCAB_PADDING * max(spec.vocab, target.vocab):
        warn(
            f"--draft: {spec.name} has {spec.vocab} token ids and the target {target.name} {target.vocab}: a "
            "draft model must share the target's tokenizer (its tokens are verified by id); priced as given"
        )
    return head_spec(kind, spec, target, model_config(name)) if kind.is_head else spec


def refuse_another_kinds_head(kind: DraftKind, name: str) -> None:
    """SpecsimError where ``name`` is a head another drafting kind ships (an EAGLE-3 head priced as a draft
    model or as an EAGLE-1 head): its layers read what only its own kind feeds them."""
    shipped = find_shipped(name)
    names = {n.lower() for n in (name, *(shipped[1].names if shipped else ()))}
    for other in draft_kinds().values():
        heads = {h.lower() for h in other.preset.get("heads", {}).values()} if other.is_head else set()
        if other.name != kind.name and names & heads:
            raise SpecsimError(
                f"--draft {name!r}: is an {other.name} head; give --draft-kind {other.name} to price it so"
            )
