"""Real runs for ``specsim check --batch B``: the batched engine against batched target-only decoding of
the same B requests, interleaved, in rounds until each row's measured speedup is precise enough or a cap
is reached.

A row (method × scenario × γ) stops after a round from ``min_rounds`` on once its decode-phase speedup has a
95% half-width ≤ ``halfwidth``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from calibrate.run.timing import out_of_time
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class BatchRun:
    """One batched run's decode phase: ms and tokens after the first pass; for SD the draft and verify ms,
    blocks and running request-blocks (for target-only, ``blocks`` counts its steps)."""

    ms: float
    tokens: int
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    blocks: int = 0
    request_blocks: int = 0

    @property
    def overhead_ms(self) -> float:
        return self.ms - self.draft_ms - self.verify_ms


def batch_run(result) -> BatchRun:
    """A :class:`calibrate.run.batch_engine.BatchResult` reduced to its decode phase."""
    blocks = result.blocks[1:]
    return BatchRun(
        ms=sum(b.block_ms for b in blocks),
        tokens=sum(sum(b.emitted) for b in blocks),
        draft_ms=sum(b.draft_ms for b in blocks),
        verify_ms=sum(b.verify_ms for b in blocks),
        blocks=len(blocks),
        request_blocks=sum(sum(1 for e in b.emitted if e) for b in blocks),
    )


def draft_prompt_tokens(result) -> int:
    """The longest draft prompt of a batched SD run, from the draft's width after its first block (the
    prompt, then g₀ − 1 draft steps of one column)."""
    if len(result.blocks) < 2:
        return max(result.prompt_tokens)
    return result.blocks[1].draft_columns - result.blocks[0].gamma + 1


@dataclass
class BatchRuns:
    """Per (scenario group, batch index): target-only runs and, per (method, γ), SD runs (one per round); the
    batches' prompt ids, prompt tokens and draft prompt tokens."""

    base: dict[tuple, list[BatchRun]] = field(default_factory=dict)
    sd: dict[tuple, dict[tuple, list[BatchRun]]] = field(default_factory=dict)
    prompts: dict[tuple, list[str]] = field(default_factory=dict)
    prompt_tokens: dict[tuple, tuple[int, ...]] = field(default_factory=dict)
    draft_tokens: dict[tuple, int] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0


def check_group_sizes(counts: dict[str, int], batch: int, limit: int | None = None) -> None:
    """SpecsimError when a scenario group (name: prompts) has fewer prompts than one batch of ``batch``
    (``limit``: the --limit that cut the prompt set, named in the hint)."""
    more = "--prompts with more" if limit is None else f"a larger --limit than {limit}, --prompts with more"
    for scenario, n in counts.items():
        if n < batch:
            raise SpecsimError(
                f"--batch {batch}: the {scenario} prompts number {n}, fewer than one batch (pass {more}, or "
                "a smaller --batch)"
            )


def batches_of(setup, batch: int) -> dict[tuple, list]:
    """Requests in batches of B per scenario group (prompt order), keyed (group, index)."""
    out = {}
    check_group_sizes({setup.scenario(g, None): len(reqs) for g, reqs in setup.groups.items()}, batch)
    for group, reqs in setup.groups.items():
        for i in range(len(reqs) // batch):
            out[(group, i)] = reqs[i * batch : (i + 1) * batch]
    return out


def members_of(drafter):
    """The batched engine's draft context: None for a text pair's drafter, else the one member."""
    members = getattr(drafter, "members", None)
    if members is not None and len(members) != 1:
        raise SpecsimError(
            f"--batch: the batched engine drafts with one context per request; method "
            f"{getattr(drafter, 'method', '?')!r} has {len(members)} (an ensemble)"
        )
    return members


def run_batch_check(
    setup,
    gammas: list[int],
    batch: int,
    *,
    max_new_tokens: int,
    halfwidth: float = 0.015,
    min_rounds: int = 2,
    max_rounds: int = 6,
    max_seconds: float | None = None,
    progress: Callable | None = None,
    before_round: Callable[[int], None] | None = None,
    acceptance=None,
) -> BatchRuns:
    """Interleaved batched runs in rounds (module docstring); ``before_round(rnd)`` runs before each round
    (``check --remeasure-batched``: a round of the batched cost's sweep); ``acceptance``: the synthetic
    schedule SD runs accept by."""
    from calibrate.run.batch_engine import batch_speculative_decode, batch_target_decode
    from specsim.check.batch_comparison import measure_batches

    # pads are masked, so the engines' default pad id serves every vocabulary
    kw = {"max_new_tokens": max_new_tokens, "eos_token_id": setup.eos}
    members = {m: members_of(setup.drafter(m)) for m in setup.methods}
    batches = batches_of(setup, batch)
    runs = BatchRuns(
        base={k: [] for k in batches},
        sd={(m, g): {k: [] for k in batches} for m in setup.methods for g in gammas},
        prompts={k: [r.prompt_id for r in reqs] for k, reqs in batches.items()},
    )

    def sd_run(m, g, reqs):
        return batch_speculative_decode(
            setup.target, setup.draft, reqs, gamma=g, members=members[m], method=m, acceptance=acceptance,
            **kw,
        )  # fmt: skip

    first = next(iter(batches.values()))  # warm-up: first-call allocations, thrown away
    batch_target_decode(setup.target, first, **(kw | {"max_new_tokens": 4}))
    sd_run(setup.methods[0], max(gammas), first)
    active = [(m, g) for m in setup.methods for g in gammas]
    keys = list(batches)
    t0 = time.perf_counter()
    for rnd in range(max_rounds):
        if before_round:
            before_round(rnd)
        order = keys[rnd % len(keys) :] + keys[: rnd % len(keys)]
        for i, k in enumerate(progress(order, rnd) if progress else order):
            reqs = batches[k]
            before = batch_target_decode(setup.target, reqs, **kw)
            j = (i + rnd) % len(active)
            for m, g in active[j:] + active[:j]:
                out = sd_run(m, g, reqs)
                runs.sd[(m, g)][k].append(batch_run(out))
                runs.draft_tokens.setdefault((m, k), draft_prompt_tokens(out))
            after = batch_target_decode(setup.target, reqs, **kw)
            a, b = batch_run(before), batch_run(after)
            runs.base[k].append(BatchRun(ms=(a.ms + b.ms) / 2, tokens=a.tokens, blocks=a.blocks))
            runs.prompt_tokens[k] = before.prompt_tokens
        runs.rounds = rnd + 1
        if rnd + 1 >= min_rounds:
            active = [
                (m, g)
                for m, g in active
                if any(
                    measure_batches(runs.base, runs.sd[(m, g)], [k for k in keys if k[0] == grp]).halfwidth
                    > halfwidth
                    for grp in {k[0] for k in keys}
                )
            ]
        if not active or out_of_time(t0, max_seconds, rnd + 1, min_rounds):
            break
    runs.seconds = time.perf_counter() - t0
    return runs


def preflight(setup, entries: dict, sizes: list[int], gammas: list[int], max_new_tokens: int) -> None:
    """What the runs could not price fails before anything runs: every batched prompt's greedy trace per
    method, and every trace's draft plan at the largest γ."""
    from calibrate.measure.check_runs import greedy_trace
    from specsim.draft_shapes.draft_plans import draft_plan

    for b in sizes:
        for (group, _), reqs in batches_of(setup, b).items():
            for m in setup.methods:
                for r in reqs:
                    greedy_trace(entries[(group, m)], r.prompt_id)
    for entry in entries.values():
        for trace in entry.traces:
            if trace.match is not None:
                draft_plan(max(gammas), trace, max_new_tokens)


def batch_check_rows(
    runs: BatchRuns, profile, entries: dict, methods, gammas, batch: int, max_new_tokens: int
):
    """One :class:`~specsim.profile_format.CheckRow` per scenario group × method × γ: the measured batches'
    speedup
    beside the batched walk's prediction for the same prompts."""
    from specsim.check.batch_comparison import batch_check_row, batch_specs, measure_batches

    rows = []
    for group in sorted({k[0] for k in runs.base}):
        keys = [k for k in runs.base if k[0] == group]
        for m in methods:
            entry = entries[(group, m)]
            specs = [
                batch_specs(
                    entry, runs.prompts[k], runs.prompt_tokens[k], runs.draft_tokens[(m, k)], max_new_tokens
                )
                for k in keys
            ]
            for g in gammas:
                measured = measure_batches(runs.base, runs.sd[(m, g)], keys)
                rows.append(batch_check_row(profile, entry, g, batch, specs, measured, max_new_tokens))
    return rows
