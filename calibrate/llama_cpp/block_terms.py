"""The work of llama.cpp's draft/verify alternation outside the forwards ``llama-bench`` times (ms), in
``llama-server``: synthetic-acceptance blocks (``--spec-synth-rates``), streamed (:func:`blocks_of_run`), give
o_e per emitted token and o₀ + o_g·g (:func:`fit_block_terms`); each γ is priced at its own median residual
over the grids' forwards, from real-acceptance runs on held-out prompts where measured (:class:`RunSample`:
synthetic blocks priced real ones up to 120 ms off at γ 5 and 6), else from the synthetic blocks. A
target-only step's residual (its ms − Tp) is its own term, from target-only runs beside the real ones where
measured (streamed arrivals cannot resolve sub-ms steps). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibrate.llama_cpp.cpu_share import CpuShare
from calibrate.llama_cpp.server import LlamaServer, timed_completion
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import CATCHUP, DRAFT, TARGET, PassCost, draft_steps_ms
from specsim.draft_shapes.ngram_lookup import NgramSimple, ngram_simple_draft
from specsim.errors import SpecsimError
from specsim.profile_format.cost_model import CostModel, with_residuals
from specsim.profile_format.overhead_grid import OverheadGrid

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BlockSample:
    """One measured block (or target-only step: γ = 0): drafts g, accepted, tokens emitted, the target's
    cache length before it, its ms and the cores others used during its run."""

    gamma: int
    drafts: int
    accepted: int
    emitted: int
    context_tokens: int
    ms: float
    cores_foreign: float = 0.0
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class RunSample:
    """One real-acceptance run of llama-server, not streamed (as the one-request check runs): γ, its prompt
    tokens, the tokens decoded after the prompt pass's (n − 1), drafts proposed and accepted, and the
    server's decode ms over them (``predicted_ms``)."""

    gamma: int
    prompt_tokens: int
    tokens: int
    drafted: int
    accepted: int
    ms: float
    cores_foreign: float = 0.0
    schema_version: int = SCHEMA_VERSION

    @property
    def blocks(self) -> int:
        """Each block emits its accepted drafts and one token of the target's: n − 1 = accepted + blocks."""
        return self.tokens - self.accepted


@dataclass(frozen=True)
class BlockTerms:
    """Fitted ms outside the forwards: per block ``per_block_ms`` + ``per_draft_ms``·g + ``per_token_ms``
    per emitted token; ``per_step_ms`` per target-only step; the fit's residual spread (ms, RMS) and the
    samples behind it; ``per_gamma_ms``: (γ, median ms) of each measured γ's blocks beyond the priced
    per-token work (empty: the linear fit prices every γ)."""

    per_block_ms: float
    per_draft_ms: float
    per_token_ms: float
    per_step_ms: float
    rms_ms: float
    blocks: int
    steps: int
    per_gamma_ms: tuple[tuple[int, float], ...] = ()
    real_runs: int = 0  # the real-acceptance runs behind per_gamma_ms (0: the synthetic blocks)
    real_steps: int = 0  # the target-only runs behind per_step_ms (0: the synthetic runs' steps)
    schema_version: int = SCHEMA_VERSION

    def block_ms(self, gamma) -> np.ndarray:
        """What a block at γ pays outside its forwards and its emitted tokens: its γ's median, linear between
        measured γ and held flat beyond them; the linear fit without per-γ medians."""
        gamma = np.asarray(gamma, dtype=float)
        if not self.per_gamma_ms:
            return self.per_block_ms + self.per_draft_ms * gamma
        gs, ms = zip(*self.per_gamma_ms)
        return np.interp(gamma, np.asarray(gs, dtype=float), np.asarray(ms, dtype=float))


def synthetic_rates(gamma: int, accepted: int) -> tuple[float, ...]:
    """``--spec-synth-rates`` that accept exactly ``accepted`` of ``gamma`` drafts in every block."""
    if not 0 <= accepted <= gamma:
        raise SpecsimError(f"synthetic acceptance: expected 0 <= accepted <= gamma = {gamma}, got {accepted}")
    return (1.0,) * accepted + (0.0,) * (gamma - accepted)


def schedule(gamma: int, accepted: int, n_predict: int) -> list[tuple[int, int, int]]:
    """(drafts, accepted, emitted) of each block after the prompt pass's token, as llama-server caps it."""
    out, t = [], 1
    while t < n_predict:
        g = max(0, min(gamma, n_predict - t - 1))
        a = min(accepted, g)
        e = min(a + 1, n_predict - t)
        out.append((g, a, e))
        t += e
    return out


def lookup_schedule(prompt_ids, out_ids, kind: NgramSimple, accepted: int) -> list[tuple[int, int, int]]:
    """(drafts, accepted, emitted) of each block of a streamed n-gram run accepting ``accepted`` drafts per
    block: the lookup replayed over the run's own tokens
    (:func:`specsim.draft_shapes.ngram_lookup.ngram_simple_draft`), checked against them."""
    n, out, t = len(out_ids), [], 1
    while t < n:
        history = list(prompt_ids) + list(out_ids[: t - 1])
        draft = ngram_simple_draft(history, out_ids[t - 1], kind)[: max(0, n - t - 1)]
        a = min(accepted, len(draft))
        if list(out_ids[t : t + a]) != draft[:a]:
            raise SpecsimError("n-gram block terms: the streamed tokens are not the replayed lookup's drafts")
        e = min(a + 1, n - t)
        out.append((len(draft), a, e))
        t += e
    return out


def blocks_of_run(times_s, gamma: int, accepted: int, prompt_tokens: int, foreign: float = 0.0, plan=None):
    """The blocks of one streamed run (token arrival seconds) under its known schedule (``plan``: the
    lookup's, else llama-server's for a draft model)."""
    n = len(times_s)
    plan = schedule(gamma, accepted, n) if plan is None else plan
    out, t = [], 1
    for g, a, e in plan:
        ms = 1000.0 * (times_s[t + e - 1] - times_s[t - 1])
        out.append(BlockSample(gamma, g, a, e, prompt_tokens + t - 1, ms, foreign))
        t += e
    return out


def measure_runs(
    servers: dict, tokens, runs: list[tuple[int, int, int]], rounds: int, lookup: NgramSimple | None = None
) -> list[BlockSample]:
    """``rounds`` rounds of every (γ, accepted, n_predict) run on ``servers[(γ, accepted)]`` (γ = 0: the
    target-only server; with ``lookup``, n-gram servers whose blocks replay its lookup), interleaved."""
    out = []
    for _ in range(rounds):
        for gamma, accepted, n in runs:
            server: LlamaServer = servers[(gamma, accepted)]
            with CpuShare((server.pid,)) as share:
                times, ids, _ = server.stream(tokens, n)
            plan = lookup_schedule(tokens, ids, lookup, accepted) if lookup and gamma else None
            out += blocks_of_run(times, gamma, accepted, len(tokens), share.foreign, plan)
    return out


def forward_ms(cost: PassCost, s: BlockSample) -> float:
    """The forwards of one sample priced through ``cost``: a target step, or g draft steps, the catch-up over
    g + 1 rows (where the source's draft runs them) and the verification of g + 1 rows."""
    ctx = float(s.context_tokens)
    if s.drafts == 0:
        return float(cost.pass_ms(TARGET, 1, ctx).ms)
    draft = float(np.sum(draft_steps_ms(cost, ctx + np.arange(s.drafts), 1).ms))
    if cost.draft_catchup:
        draft += float(cost.pass_ms(DRAFT, s.drafts + 1, ctx, kind=CATCHUP).ms)
    return draft + float(cost.pass_ms(TARGET, s.drafts + 1, ctx).ms)


def fit_block_terms(
    samples: list[BlockSample], cost: PassCost, runs: tuple[RunSample, ...] = ()
) -> BlockTerms:
    """The blocks' residuals: o_e from the (γ, emitted) cells' medians, o₀ + o_g·g by least squares on the
    rest, each γ's median beyond the per-token work the profile prices (max(o_e, 0)·emitted; from ``runs``'
    real blocks where given: :func:`run_residual_ms`), and the steps' median (module docstring);
    SpecsimError without blocks of two draft counts or target-only steps; ``runs`` at γ 0 (target-only)
    price the step instead of the synthetic runs' steps."""
    blocks = [s for s in samples if s.gamma > 0 and s.drafts > 0]
    steps = [s for s in samples if s.gamma == 0]
    # Two emitted counts at one γ are checked by _per_token_ms, which needs them.
    if len({s.drafts for s in blocks}) < 2 or not steps:
        raise SpecsimError("block terms: need blocks of two draft counts, and target-only steps")
    y = np.array([s.ms - forward_ms(cost, s) for s in blocks])
    gammas, emitted = np.array([s.gamma for s in blocks]), np.array([s.emitted for s in blocks], dtype=float)
    # Medians, per γ and per (γ, emitted) cell: host stalls give single blocks hundreds of ms; and a γ of its
    # own, as the grids' error at g + 1 rows differs by γ and no line in g carries it (ARCHITECTURE.md).
    per_token = _per_token_ms(gammas, emitted, y)
    (o0, og), rms = line_ms(blocks, y - per_token * emitted)
    real = [r for r in runs if r.gamma > 0]
    if real:  # real blocks price each γ where measured (module docstring)
        beyond = np.array([run_residual_ms(cost, r, max(per_token, 0.0)) for r in real])
        at = np.array([r.gamma for r in real])
    else:
        beyond, at = y - max(per_token, 0.0) * emitted, gammas
    per_gamma = tuple((int(g), float(np.median(beyond[at == g]))) for g in sorted(set(at.tolist())))
    target_only = [run_residual_ms(cost, r, 0.0) for r in runs if r.gamma == 0]
    step = target_only or [s.ms - forward_ms(cost, s) for s in steps]
    return BlockTerms(
        o0, og, per_token, float(np.median(step)), rms, len(blocks), len(steps), per_gamma, len(real),
        len(target_only),
    )  # fmt: skip


def line_ms(blocks: list[BlockSample], residual_ms: np.ndarray) -> tuple[tuple[float, float], float]:
    """Least squares of the blocks' residuals (ms) on o₀ + o_g·g: ((o₀, o_g), RMS of what is left)."""
    x = np.array([[1.0, s.drafts] for s in blocks])
    coef, *_ = np.linalg.lstsq(x, residual_ms, rcond=None)
    rms = float(np.sqrt(np.mean((residual_ms - x @ coef) ** 2)))
    return (float(coef[0]), float(coef[1])), rms


def _per_token_ms(gammas: np.ndarray, emitted: np.ndarray, y: np.ndarray) -> float:
    """The slope in emitted tokens of the (γ, emitted) cells' median residuals, each γ its own level."""
    cells = sorted({(int(g), float(e)) for g, e in zip(gammas, emitted)})
    levels = sorted({g for g, _ in cells})
    if len(cells) == len(levels):
        raise SpecsimError("block terms: need blocks of two emitted counts at one gamma")
    x = np.array([[float(g == k) for k in levels] + [e] for g, e in cells])
    med = np.array([np.median(y[(gammas == g) & (emitted == e)]) for g, e in cells])
    coef, *_ = np.linalg.lstsq(x, med, rcond=None)
    return float(coef[-1])


def run_blocks(run: RunSample) -> list[BlockSample]:
    """The blocks of a run whose schedule the server does not report, spread evenly: its drafts over its
    blocks (the first ``drafted mod blocks`` one more), each at the context its share of the tokens
    reaches; SpecsimError for a run with no block after the prompt pass."""
    if run.blocks < 1:
        raise SpecsimError(
            f"real run at gamma {run.gamma}: {run.tokens} tokens after the prompt pass, no block"
        )
    n, per, extra = run.blocks, run.drafted // run.blocks, run.drafted % run.blocks
    step = run.tokens / n
    return [
        BlockSample(run.gamma, per + (i < extra), 0, 1, run.prompt_tokens + int(i * step), 0.0)
        for i in range(n)
    ]


def run_residual_ms(cost: PassCost, run: RunSample, per_token_ms: float) -> float:
    """A real run's ms per block beyond its forwards priced through ``cost`` (:func:`run_blocks`) and
    ``per_token_ms`` per emitted token."""
    forwards = sum(forward_ms(cost, b) for b in run_blocks(run))
    return (run.ms - forwards - per_token_ms * run.tokens) / run.blocks


def measure_real_runs(servers: dict, prompts, n_predict: int, rounds: int, threads: int) -> list[RunSample]:
    """``rounds`` rounds of every prompt (token ids) on every draft server ``servers[γ]`` (real acceptance),
    not streamed, each run just after a target-only one on ``servers[0]`` where given: the step, which
    prices every row of a check alike, is sampled as often as the blocks and at the same moments, so host
    drift during the stage hits both alike (one target-only run a round priced a check's step 6-9 % off
    where its blocks came within 5 %)."""

    def sample(gamma: int, tokens) -> RunSample:
        c = timed_completion(servers[gamma], tokens, n_predict, threads)
        args = (c.prompt_n, c.predicted_n - 1, c.draft_n, c.draft_accepted, c.predicted_ms)
        return RunSample(gamma, *args, c.cores_foreign)

    out = []
    for _ in range(rounds):
        for gamma in sorted(g for g in servers if g > 0):
            for tokens in prompts:
                if 0 in servers:
                    out.append(sample(0, tokens))
                out.append(sample(gamma, tokens))
    return out


def overhead_grid(terms: BlockTerms, gammas) -> OverheadGrid:
    """Each γ's block beyond its forwards and emitted tokens, with its sign (one calibration's real blocks
    ran 31-130 ms under llama-bench's forwards, which a clamp at 0 priced as 0): checked with the step by
    :func:`checked_calibration`."""
    ms = terms.block_ms(np.asarray(gammas))
    return OverheadGrid.at_batch_one(dict(zip((int(g) for g in gammas), ms)))


def checked_calibration(model: CostModel) -> CostModel:
    """``model``, its blocks and target-only step checked through
    :func:`specsim.profile_format.cost_model.with_residuals`, as ``--remeasure``'s are: signed, since real
    runs carry the host's speed and llama-bench's forwards were timed minutes before them (a -5.4 ms step
    clamped at 0 priced its check's step 9 % slow); SpecsimError where a block or a step would be priced at
    or below zero."""
    try:
        step_ms = model.overhead_ms_per_target_step
        return with_residuals(model, model.overhead_ms_per_block, step_ms, "block terms")
    except SpecsimError as err:
        raise SpecsimError(f"{err}: the host changed between stages, calibrate again") from None


def remeasured_model(model: CostModel, runs: list[RunSample]) -> tuple[CostModel, BlockTerms]:
    """``model`` with the target-only step and each measured γ's block re-priced from ``runs`` (real runs
    on held-out prompts between a check's rounds, ``check --runtime llama.cpp --remeasure``): medians over
    the grids' forwards as :func:`fit_block_terms` takes them; other γ, the n-gram lookup and the grids as
    calibrated. Also the re-fitted terms (per_gamma_ms: the re-measured γ only), for the notes."""
    steps = [r for r in runs if r.gamma == 0]
    real = [r for r in runs if r.gamma > 0]
    if not steps or not real:
        raise SpecsimError("re-measured blocks: need target-only runs and draft-model runs")
    cost = GridPassCost(model)
    per_token = max(model.overhead_ms_per_token, 0.0)
    step = float(np.median([run_residual_ms(cost, r, 0.0) for r in steps]))
    beyond = {
        g: [run_residual_ms(cost, r, per_token) for r in real if r.gamma == g]
        for g in {r.gamma for r in real}
    }
    per_gamma = tuple((g, float(np.median(beyond[g]))) for g in sorted(beyond))
    old = model.overhead_ms_per_block
    ms = dict(zip(old.gamma, (float(row[0]) for row in old.ms))) | dict(per_gamma)
    terms = BlockTerms(0.0, 0.0, per_token, step, 0.0, 0, 0, per_gamma, len(real), len(steps))
    return with_residuals(model, OverheadGrid.at_batch_one(ms), step, "re-measured blocks"), terms
