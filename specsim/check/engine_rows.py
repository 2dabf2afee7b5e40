"""Check rows of an engine this project did not write (llama.cpp): its runs against two predictions.

A run (:class:`EngineRun`) is what the engine reports per request. Measured: the decode-phase speedup over
its target-only runs (:func:`specsim.check.comparison.measure`). Predicted through
:func:`specsim.predict.pricing.price`: from the traces replayed at γ (``speedup_predicted``), and from each
run's own τ in blocks of τ, the costs alone (``speedup_predicted_counts``).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.check.comparison import BLOCK_TERM, TARGET_TERM, RequestRun, compared_row, measure
from specsim.draft_shapes.ngram_lookup import NgramSimple, ngram_counts_plan
from specsim.errors import SpecsimError
from specsim.predict.prediction import reference_tau, textbook_speedup
from specsim.predict.pricing import RequestSpec, draft_cost, price, target_only
from specsim.predict.tree_costs import plan_cost
from specsim.profile_format import CheckRow, MethodAcceptance, Profile

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class EngineRun:
    """One request as the engine reported it: prompt and decode-phase ms, tokens (the first from the prompt
    pass), drafts proposed and accepted."""

    prompt_id: str
    prompt_ms: float
    decode_ms: float
    tokens: int
    drafted: int = 0
    accepted: int = 0
    schema_version: int = SCHEMA_VERSION

    @property
    def passes(self) -> int:
        """Target passes after the prompt's: one per block, drafted or not."""
        return self.tokens - 1 - self.accepted

    def request_run(self) -> RequestRun:
        """As :func:`specsim.check.comparison.measure` reads a run (the engine's terms are not split)."""
        return RequestRun(
            self.prompt_id, 0.0, self.prompt_ms, 0.0, self.decode_ms, 0.0, self.tokens, 1, self.passes + 1
        )


def _runs(by_prompt: dict[str, list[EngineRun]]) -> dict[str, list[RequestRun]]:
    return {p: [r.request_run() for r in runs] for p, runs in by_prompt.items()}


def _counts_entry(entry: MethodAcceptance, runs: list[EngineRun], gamma: int) -> MethodAcceptance:
    """``entry`` with τ at γ from one prompt's runs (tokens after the first over target passes)."""
    decoded = sum(r.tokens - 1 for r in runs)
    tau = min(max(decoded / max(sum(r.passes for r in runs), 1), 1.0), gamma + 1.0)
    return replace(entry, traces=(), gamma=gamma, tau=tau, accepted_histogram=None)


def engine_row(
    profile: Profile,
    entry: MethodAcceptance,
    draft: int | NgramSimple,
    base: dict[str, list[EngineRun]],
    sd: dict[str, list[EngineRun]],
    *,
    runtime: str,
    reference_gamma: int,
) -> CheckRow:
    """One row (module docstring): ``entry``'s traces for the prompts of ``sd``, at γ ``draft`` or an n-gram
    kind."""
    traces = {t.prompt_id: t for t in entry.traces if t.match is not None}
    missing = [p for p in sd if p not in traces]
    if missing:
        raise SpecsimError(f"check: method {entry.method!r} has no llama.cpp trace for prompt {missing[0]!r}")
    measured = measure(_runs(base), _runs(sd))
    ngram = isinstance(draft, NgramSimple)
    # each prompt priced over its own runs' tokens (the zoo's image requests end where our engine's did)
    specs = [
        RequestSpec(t.prompt_tokens, t.draft_prompt_tokens or t.prompt_tokens, 0, t, sd[p][0].tokens,
                    prompt_id=p)
        for p, t in ((p, traces[p]) for p in sorted(sd))
    ]  # fmt: skip
    cost = draft_cost(profile, draft)  # one set of grids prices both predictions
    pred = price(profile, entry, draft, specs, cost)
    counts = _counts_prediction(profile, entry, draft, sd, cost)
    gamma = draft.size_m if ngram else int(draft)
    book = None
    if not ngram:
        c = pred.ratios()["c"]  # Tq/Tp of the priced passes, for the textbook's tau / (gamma*c + 1)
        tau_ref, g_ref = reference_tau(entry, reference_gamma)
        book = textbook_speedup(tau_ref, g_ref, gamma, c)
    row = compared_row(
        entry,
        gamma,
        measured,
        tau=pred.tau,
        decode_speedup=pred.decode_speedup,
        request_speedup=pred.request_speedup,
        textbook=book,
        terms=pred.terms_ms_per_block(),
        notes=f"{runtime}: decode phase after the prompt pass's token; traces from {runtime}'s logits",
        draft=draft.label if ngram else None,
        runtime=runtime,
        speedup_predicted_counts=counts,
    )
    sd_ms = float(np.mean([[r.decode_ms for r in rs] for rs in sd.values()], axis=1).sum())
    passes = sum(rs[0].passes for rs in sd.values())
    blocks = max(pred.sd_decode.blocks, 1e-12)
    block = {"predicted": pred.sd_decode.total_ms / blocks, "measured": sd_ms / max(passes, 1)}
    terms = {TARGET_TERM: row.terms_ms_per_block[TARGET_TERM], BLOCK_TERM: block}
    return replace(
        row,
        terms_ms_per_block=terms,
        target_ms_per_token=pred.target_ms_per_token,
        sd_ms_per_token=pred.sd_ms_per_token,
    )


def _counts_prediction(profile, entry, draft, sd: dict[str, list[EngineRun]], cost) -> float:
    """The decode-phase speedup priced with each prompt's τ from its runs' counts, over its runs' tokens (an
    n-gram kind: each run's blocks from its drafted and accepted counts, :func:`ngram_counts_plan`)."""
    if isinstance(draft, NgramSimple):
        return _ngram_counts_speedup(entry, draft, sd, cost)
    out = []
    for p, runs in sorted(sd.items()):
        e, prompt, n = _counts_entry(entry, runs, int(draft)), _prompt(entry, p), runs[0].tokens
        out.append(price(profile, e, int(draft), [RequestSpec(prompt, prompt, 0, new_tokens=n)], cost))
    base = sum(o.base_decode.total_ms for o in out) / sum(o.base_decode.tokens for o in out)
    sd_ms = sum(o.sd_decode.total_ms for o in out) / sum(o.sd_decode.tokens for o in out)
    return float(base / sd_ms)


def _prompt(entry: MethodAcceptance, prompt_id: str) -> float:
    t = next((t for t in entry.traces if t.prompt_id == prompt_id), None)
    return t.prompt_tokens if t is not None else entry.target_prompt_tokens


def _ngram_counts_speedup(entry, draft: NgramSimple, sd: dict[str, list[EngineRun]], cost) -> float:
    """Target-only over n-gram decode ms per token, every run's blocks rebuilt from its counts."""
    base_ms = sd_ms = 0.0
    for p, runs in sorted(sd.items()):
        prompt = _prompt(entry, p)
        for r in runs:
            plan = ngram_counts_plan(draft, r.tokens, r.drafted, r.accepted)
            got = plan_cost(cost, plan, target_prompt_tokens=prompt, draft_prompt_tokens=prompt, fused=False)
            sd_ms += got.total_ms
            base_ms += target_only(cost, prompt, r.tokens)[1].total_ms
    return float(base_ms / sd_ms) if sd_ms > 0 else float("nan")
