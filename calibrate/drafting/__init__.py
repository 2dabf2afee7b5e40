"""Drafting methods: every one implements :class:`calibrate.run.proposal.Drafter`, so the engine never
branches on them.

- :class:`Method` (:mod:`.methods`): a method parsed once from its code (``plain``, ``M``, ``T``, ``C``,
  ``F``, ``Pn``, ensembles such as ``MTCP4``, ``adaptive:MTC``): members, cost fields, captioner need,
  drafter.
  :func:`make_drafter` builds a drafter from a code over a bare draft model.
- :class:`TextDrafter` (:mod:`.text_drafter`): ``plain``, a causal LM draft over the target's token ids.
- :class:`EnsembleDrafter`, :class:`AdaptiveEnsembleDrafter` (:mod:`.ensemble`): every multimodal method,
  an in-batch ensemble of draft contexts (:mod:`.contexts`: M, T, C, F, Pn) over one draft model.
- :func:`make_request` builds a target request from a prompt with ``<image>`` placeholders; captions come
  from :func:`hf_captioner` (default prompt :data:`CAPTION_PROMPT`), optionally :class:`CachedCaptioner`.
- :func:`propose_tree`, :func:`accept_path` (:mod:`.tree_drafter`): token-tree drafting for the tree engine.
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
