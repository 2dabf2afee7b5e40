"""Real runs for ``specsim check``: target-only and speculative decoding interleaved, in rounds, until each
row's measured speedup is precise enough or a cap is reached; reduced to
:class:`specsim.check.comparison.RequestRun`.

A row (method × scenario × γ; a "γ" may be a token tree or a draft-length policy) stops after a round from
``min_rounds`` on once its decode-phase speedup has a 95% half-width ≤ ``halfwidth``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from calibrate.run.timing import out_of_time
from specsim.check.comparison import Measured, PromptSpec, RequestRun, check_row, measure
from specsim.draft_shapes.trees import TreeSpec
from specsim.errors import SpecsimError
from specsim.jsonio import few

# Set-up stages a server would not pay: target-features drafting recomputes the target's vision features
# here, where a server reuses those of the target's prefill (see calibrate.drafting.contexts).
NOT_CHARGED = ("reused_target_vision_ms",)


def request_run(result) -> RequestRun:
    """A :class:`calibrate.run.decode_records.DecodeResult` reduced to ms by term (blocks after the first)
    and counts."""
    rest = result.blocks[1:]
    setup = sum(v for k, v in result.setup_ms.items() if k not in NOT_CHARGED)
    return RequestRun(
        prompt_id=result.prompt_id,
        setup_ms=float(setup),
        first_ms=result.blocks[0].block_ms,
        draft_ms=float(sum(b.draft_ms for b in rest)),
        verify_ms=float(sum(b.verify_ms for b in rest)),
        overhead_ms=float(sum(b.overhead_ms for b in rest)),
        tokens=len(result.tokens),
        first_tokens=result.blocks[0].emitted,
        blocks=len(result.blocks),
    )


def mean_run(a: RequestRun, b: RequestRun) -> RequestRun:
    """The mean of two runs of the same request (the target-only runs before and after a prompt's SD runs)."""
    avg = {
        k: (getattr(a, k) + getattr(b, k)) / 2
        for k in ("setup_ms", "first_ms", "draft_ms", "verify_ms", "overhead_ms")
    }
    return RequestRun(
        prompt_id=a.prompt_id, tokens=a.tokens, first_tokens=a.first_tokens, blocks=a.blocks, **avg
    )


def prompt_spec(result, images: int, max_new_tokens: int) -> PromptSpec:
    """Where a prompt's walk starts, read off an SD run: the draft's prompt is its first (fused) step's
    rows."""
    first = result.blocks[0]
    draft = first.draft_first_rows if first.gamma > 0 else result.prompt_tokens
    return PromptSpec(
        prompt_id=result.prompt_id,
        prompt_tokens=result.prompt_tokens,
        draft_prompt_tokens=draft,
        images=images,
        max_new_tokens=max_new_tokens,
    )


@dataclass
class CheckRuns:
    """Everything measured: per prompt the target-only runs (one mean per round), per (method, γ) and prompt
    the SD runs (one per round it ran), the raw SD results of the first round (replay agreement), specs."""

    base: dict[str, list[RequestRun]] = field(default_factory=dict)
    sd: dict[tuple[str, int], dict[str, list[RequestRun]]] = field(default_factory=dict)
    first: dict[tuple[str, int], list] = field(default_factory=dict)
    specs: dict[tuple[str, str], PromptSpec] = field(default_factory=dict)
    stages: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0

    def measured(self, method: str, gamma: int, prompt_ids: list[str]) -> Measured:
        """The measured side of one row (prompts of one scenario group)."""
        runs = self.sd[(method, gamma)]
        return measure({p: self.base[p] for p in prompt_ids}, {p: runs[p] for p in prompt_ids})


def decode_run(target, drafter, request, draft, acceptance=None, **kw):
    """One speculative run of ``request``: a token tree through the tree engine, a fixed γ or a policy
    through the chain engine (``acceptance``: a synthetic schedule, chains only)."""
    from calibrate.drafting import tree_drafting
    from calibrate.run.engine import speculative_decode
    from calibrate.run.tree_engine import tree_decode
    from specsim.draft_shapes.trees import TreeSpec

    if isinstance(draft, TreeSpec):
        return tree_decode(target, tree_drafting(drafter), request, tree=draft, **kw)
    return speculative_decode(target, drafter, request, gamma=draft, acceptance=acceptance, **kw)


def _warm_up(setup, drafters: dict, gammas: list, kw: dict, acceptance=None) -> None:
    """Short runs of target-only decoding and of every run of the check, thrown away: first-call allocations,
    and on a GPU each pass shape's first kernels (a γ verifies γ+1 rows)."""
    from calibrate.run.engine import target_decode

    warm, short = setup.requests[0], kw | {"max_new_tokens": 4}
    target_decode(setup.target, warm, **short)
    chains = [g for g in gammas if isinstance(g, int)]
    others = [g for g in gammas if not isinstance(g, int)]
    for d in drafters.values():
        for g in chains + others:
            decode_run(setup.target, d, warm, g, acceptance, **short)


def run_check(
    setup,
    gammas: list,
    *,
    max_new_tokens: int,
    device="cpu",
    halfwidth: float = 0.015,
    min_rounds: int = 2,
    max_rounds: int = 6,
    max_seconds: float | None = None,
    progress: Callable | None = None,
    acceptance=None,
) -> CheckRuns:
    """Interleaved real runs in rounds (see the module docstring); ``setup`` is a
    :class:`calibrate.workload.run_setup.Setup`-like object (target, methods, requests, prompts, drafter(),
    eos, groups); ``gammas``: fixed γ (int), token trees and draft-length policies, in any mix;
    ``acceptance``: the synthetic schedule SD runs accept by (:mod:`calibrate.run.synthetic_acceptance`)."""
    from calibrate.run.engine import target_decode

    kw = {"max_new_tokens": max_new_tokens, "eos_token_id": setup.eos, "device": device}
    drafters = {m: setup.drafter(m) for m in setup.methods}
    _warm_up(setup, drafters, gammas, kw, acceptance)
    images = {r.prompt_id: len(p.images) for p, r in zip(setup.prompts, setup.requests)}
    groups = {n: [r.prompt_id for r in reqs] for n, reqs in setup.groups.items()}
    runs = CheckRuns(
        base={r.prompt_id: [] for r in setup.requests},
        sd={(m, g): {r.prompt_id: [] for r in setup.requests} for m in setup.methods for g in gammas},
    )
    active = [(m, g) for m in setup.methods for g in gammas]
    t0 = time.perf_counter()
    for rnd in range(max_rounds):
        order = setup.requests[rnd % len(setup.requests) :] + setup.requests[: rnd % len(setup.requests)]
        for i, req in enumerate(progress(order, rnd) if progress else order):
            before = request_run(target_decode(setup.target, req, **kw))
            k = (i + rnd) % len(active)
            for m, g in active[k:] + active[:k]:
                out = decode_run(setup.target, drafters[m], req, g, acceptance, **kw)
                runs.sd[(m, g)][req.prompt_id].append(request_run(out))
                if rnd == 0:
                    runs.first.setdefault((m, g), []).append(out)
                    runs.specs[(m, req.prompt_id)] = prompt_spec(out, images[req.prompt_id], max_new_tokens)
            runs.base[req.prompt_id].append(
                mean_run(before, request_run(target_decode(setup.target, req, **kw)))
            )
        runs.rounds = rnd + 1
        if rnd + 1 >= min_rounds:
            active = [
                (m, g)
                for m, g in active
                if any(runs.measured(m, g, ids).decode_halfwidth > halfwidth for ids in groups.values())
            ]
        if not active or out_of_time(t0, max_seconds, rnd + 1, min_rounds):
            break
    runs.seconds = time.perf_counter() - t0
    return runs


def replay_agreement(entry, results: list, draft=None) -> tuple[int, int]:
    """(#(prompt, run) whose engine block count equals the trace replay's, #compared); ``draft`` is the tree
    or policy the ``results`` ran (None: each result's own fixed γ)."""
    from specsim.draft_shapes.draft_plans import draft_plan

    by_id = {t.prompt_id: t for t in entry.traces if t.match is not None}
    same = total = 0
    for r in results:
        trace = by_id.get(r.prompt_id)
        if trace is None or len(trace.match) != len(r.tokens):
            continue
        total += 1
        same += int(draft_plan(r.gamma if draft is None else draft, trace).blocks == len(r.blocks))
    return same, total


def block_spread(results: list) -> dict:
    """ms per block after the first of a row's first-round SD runs, by term, as p50/p90/max, and each draft
    step's (the first, which feeds the last block's tokens, and the later ones): where a mean per block hides
    a few slow blocks, or one slow step."""
    rest = [b for r in results for b in r.blocks[1:] if b.gamma > 0]
    first = [b.draft_step_ms[0] for b in rest if b.draft_step_ms]
    later = [s for b in rest for s in b.draft_step_ms[1:]]
    terms = {
        "draft": [b.draft_ms for b in rest],
        "verify": [b.verify_ms for b in rest],
        "overhead": [b.overhead_ms for b in rest],
        "draft_first_step": first,
        "draft_later_step": later,
    }
    out = {k: _spread(v) for k, v in terms.items() if v}
    return out | {"blocks": len(rest)}


def _spread(ms: list[float]) -> dict[str, float]:
    p50, p90 = np.percentile(ms, [50, 90])
    return {"p50": float(p50), "p90": float(p90), "max": float(max(ms)), "n": len(ms)}


def stage_shares(results: list) -> dict[str, float]:
    """Share of decode-phase time in draft forwards, target verification and non-model overhead."""
    total = sum(r.decode_ms for r in results)
    st = [r.stage_ms() for r in results]
    return {
        k.removesuffix("_ms"): sum(s[k] for s in st) / total
        for k in ("draft_generation_ms", "target_verification_ms", "overhead_ms")
    }


# --------------------------------------------------------------------------- rows of a check
def entry_of(profile, method: str, scenario: str | None):
    """The profile's acceptance entry of ``method`` (and ``scenario`` when given); SpecsimError naming
    both."""
    cands = [
        a for a in profile.acceptance if a.method == method and (scenario is None or a.scenario == scenario)
    ]
    if not cands:
        known = few(f"{a.method}/{a.scenario}" for a in profile.acceptance) or "none"
        raise SpecsimError(
            f"profile has no acceptance entry for method={method!r} scenario={scenario!r} "
            f"(has: {known}; run 'specsim calibrate acceptance' first)"
        )
    return cands[0]


def greedy_trace(entry, prompt_id: str):
    """``entry``'s greedy trace of ``prompt_id``; SpecsimError naming the method, scenario and prompt when it
    has none (a run of that prompt could not be priced)."""
    for trace in entry.traces:
        if trace.prompt_id == prompt_id and trace.match is not None:
            return trace
    raise SpecsimError(
        f"method {entry.method!r} in scenario {entry.scenario!r}: no greedy trace for prompt {prompt_id!r} "
        "(calibrate acceptance on the same prompts, or --limit N)"
    )


def entries_of(setup, profile, scenario: str | None) -> dict:
    """(images per prompt, method) -> the profile's acceptance entry of that scenario group."""
    return {
        (n, m): entry_of(profile, m, setup.scenario(n, scenario) if n or scenario else None)
        for n in setup.groups
        for m in setup.methods
    }


def other_host(provenance, device_label: str, threads: int) -> str | None:
    """Why this host's timings may not match the profile's latency (another CPU/GPU model or thread count),
    or None; a profile that names only "cpu" (older ones) cannot be compared and gives None."""
    why = []
    if provenance.device != device_label and ":" in provenance.device:
        why.append(f"it was measured on {provenance.device!r}, this is {device_label!r}")
    if provenance.threads is not None and provenance.threads != threads:
        why.append(f"it was measured with {provenance.threads} thread(s), this run uses {threads}")
    if not why:
        return None
    return (
        "the profile's latency may not hold here: "
        + "; ".join(why)
        + " (absolute ms do not carry between hosts; re-run 'specsim calibrate latency' on this one)"
    )


def preflight(profile, entries: list, drafts: list, max_new_tokens: int) -> None:
    """Refuse, before minutes of runs, a tree or policy the profile cannot predict: no cost model, no tree
    grids, traces without draft ranks, or a policy whose replayed γ leaves the measured grid."""
    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.costs.pass_cost import TARGET, TREE
    from specsim.draft_shapes.draft_plans import draft_label

    model = profile.latency.cost_model
    cost = None if model is None else GridPassCost(model)
    for d in drafts:
        if cost is None:
            raise SpecsimError(
                f"--tree/--policy {draft_label(d)}: the profile has no cost model (run 'specsim "
                "calibrate latency')"
            )
        max_nodes = cost.measured_rows(TARGET, TREE)[-1] - 1 if isinstance(d, TreeSpec) else 0
        if isinstance(d, TreeSpec) and max_nodes < d.n:
            raise SpecsimError(
                f"--tree {d}: {d.n} nodes, but the profile's tree grids stop at n = "
                f"{max_nodes} (add it with 'specsim calibrate latency --tree {d}')"
            )
        for e in entries:
            for t in (t for t in e.traces if t.match is not None):
                _preflight_trace(cost, e, t, d, max(max_new_tokens, len(t.match)))


def _preflight_trace(cost, entry, trace, draft, max_new_tokens: int) -> None:
    """Replay ``draft`` on one trace and price it: a γ or a level pass outside the grids fails here."""
    from specsim.costs.pass_cost import TARGET
    from specsim.draft_shapes.draft_plans import draft_label, draft_plan
    from specsim.predict.tree_costs import plan_cost

    plan = draft_plan(draft, trace, max_new_tokens)
    top = int(max(plan.drafts, default=0)) if hasattr(plan, "drafts") else 0
    max_gamma = cost.measured_rows(TARGET)[-1] - 1
    if top > max_gamma:
        raise SpecsimError(
            f"--policy {draft}: reaches gamma {top} on {entry.method}/{trace.prompt_id}, but the "
            f"profile's latency grid stops at gamma {max_gamma} (cap it, e.g. "
            f"',max={max_gamma}', or calibrate more gammas)"
        )
    p = trace.prompt_tokens or entry.target_prompt_tokens
    if p:
        try:
            plan_cost(
                cost,
                plan,
                target_prompt_tokens=p,
                batch=entry.draft_batch_size,
                draft_prompt_tokens=trace.draft_prompt_tokens or entry.draft_prompt_tokens or p,
            )
        except SpecsimError as err:
            raise SpecsimError(f"{draft_label(draft)} on {entry.method}/{trace.prompt_id}: {err}") from None


def check_rows(profile, setup, entries: dict, runs, gammas: list, drafts: list) -> tuple[list, dict, dict]:
    """Check rows per scenario group × method × run, replay-vs-engine agreement by kind, stage shares."""
    rows, agreement, stages = [], {}, {}
    for n, reqs in setup.groups.items():
        ids = [r.prompt_id for r in reqs]
        for m in setup.methods:
            entry = entries[(n, m)]
            specs = [runs.specs[(m, p)] for p in ids]
            for g in gammas + drafts:
                rows.append(check_row(profile, entry, g, specs, runs.measured(m, g, ids)))
            first = {g: [r for r in runs.first[(m, g)] if r.prompt_id in set(ids)] for g in gammas + drafts}
            stages[(m, entry.scenario)] = stage_shares([r for g in gammas for r in first[g]])
            for kind, runs_of in (
                ("gamma", gammas),
                ("tree", [d for d in drafts if isinstance(d, TreeSpec)]),
                ("policy", [d for d in drafts if not isinstance(d, TreeSpec)]),
            ):
                if runs_of:
                    pairs = [
                        replay_agreement(entry, first[g], None if kind == "gamma" else g) for g in runs_of
                    ]
                    agreement[(m, entry.scenario, kind)] = (
                        sum(p[0] for p in pairs),
                        sum(p[1] for p in pairs),
                    )
    return rows, agreement, stages
