"""Drafting methods: every one implements :class:`calibrate.run.proposal.Drafter`, so the engine never
branches on them.

:class:`Method` (:mod:`.methods`) parses a code and :func:`make_drafter` builds its drafter;
:class:`TextDrafter` (``plain``); :class:`EnsembleDrafter`, :class:`AdaptiveEnsembleDrafter` (every
multimodal method: an in-batch ensemble of :mod:`.contexts` M, T, C, F, Pn); :func:`make_request`,
:func:`hf_captioner`, :class:`CachedCaptioner`; :func:`propose_tree`, :func:`accept_path` (tree engine).
More: ARCHITECTURE.md, Notes by module.
"""

from calibrate.drafting.contexts import (
    CAPTION_PROMPT,
    IMAGE_PLACEHOLDER,
    CachedCaptioner,
    HFCaptioner,
    hf_captioner,
    make_request,
)
from calibrate.drafting.ensemble import AdaptiveEnsembleDrafter, EnsembleDrafter
from calibrate.drafting.methods import MemberSpec, Method, make_drafter
from calibrate.drafting.text_drafter import PLAIN, TextDrafter
from calibrate.drafting.tree_drafter import TreeProposal, accept_path, propose_tree, tree_drafting

__all__ = [
    "CAPTION_PROMPT",
    "IMAGE_PLACEHOLDER",
    "PLAIN",
    "AdaptiveEnsembleDrafter",
    "CachedCaptioner",
    "EnsembleDrafter",
    "HFCaptioner",
    "MemberSpec",
    "Method",
    "TextDrafter",
    "TreeProposal",
    "accept_path",
    "hf_captioner",
    "make_drafter",
    "make_request",
    "propose_tree",
    "tree_drafting",
]
