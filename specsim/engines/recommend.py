"""Best draft length per batch size for a serving engine: planner latency × profile τ; 0 turns SD off there.

For every batch size B = 1..B_max the planner (:func:`specsim.hardware.plan.plan_hardware`) gives the best-γ
decode speedup τ(γ)·Tp / (γ·Tq + Tv(γ)) over γ = 1..γ_max on one device; below ``min_speedup``, γ = 0.
τ(γ) comes from :func:`specsim.predict.tau_at_gamma.tau_with_source` (exact for γ ≤ K of imported engine
counters, flagged beyond); the CLI searches γ up to :func:`default_gamma_max`.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specsim.errors import SpecsimError
from specsim.hardware.batch_limit import paying_runs, runs_text
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.plan import Plan, plan_hardware
from specsim.hardware.plan_notes import V_BELOW_ONE, image_tokens_note, v_below_one_note
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION, Efficiency
from specsim.hardware.runtime import Runtime
from specsim.predict.acceptance_source import DEFAULT_GAMMAS, Acceptance, MethodTau, of_entry
from specsim.predict.tau_at_gamma import extrapolated
from specsim.profile_format import MethodAcceptance

DEFAULT_SHOWN_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# γ the CLI tries by default where τ past K is exact (replayed traces): the hardware planner's range (1..8).
DEFAULT_GAMMA_MAX = max(DEFAULT_GAMMAS)
# The planner's own context line names one model's image tokens; recommend states the target's instead.
_PLAN_CONTEXT_LINE = "context = tokens already in the KV cache"


@dataclass(frozen=True)
class LatencyModel:
    """Where per-pass latency comes from: the planner's roofline for target and draft on one device;
    ``draft_kind`` how the draft side drafts (``draft`` None for a lookup kind)."""

    target: ModelSpec
    draft: ModelSpec | None
    device: Device
    efficiency: Efficiency | Runtime = Efficiency()
    notes: tuple[str, ...] = ()
    draft_kind: str = "model"


@dataclass(frozen=True)
class BatchChoice:
    """The recommendation at one batch size; ``gamma`` = 0 means plain decoding (SD off)."""

    batch_size: int
    gamma: int
    speedup: float  # of the choice: best_speedup, or 1.0 when SD is off
    best_gamma: int
    best_speedup: float
    tau: float  # τ at best_gamma
    tau_source: str
    c: float
    v: float
    fits_memory: bool
    o: float = 0.0  # the named overhead terms over one target-only step (the planner's o_terms)
    o_terms: dict | None = None

    @property
    def extrapolated(self) -> bool:
        return extrapolated(self.tau_source)


@dataclass(frozen=True)
class Recommendation:
    """Draft length per batch size for one method on one device, and the assumptions behind it."""

    method: str
    scenario: str
    device: str
    context_tokens: int
    gamma_max: int
    min_speedup: float
    choices: tuple[BatchChoice, ...]  # batch sizes 1..B_max
    shown_batches: tuple[int, ...]
    assumptions: tuple[str, ...]
    measured_gamma: int | None = None  # the entry's K (None: no measured γ)
    notes: tuple[str, ...] = ()  # what the numbers rest on: fit, γ past K, v < 1

    def at(self, batch_size: int) -> BatchChoice:
        for c in self.choices:
            if c.batch_size == batch_size:
                return c
        raise SpecsimError(
            f"batch size {batch_size} is outside the evaluated range 1..{self.choices[-1].batch_size}"
        )

    def schedule(self) -> list[tuple[int, int, int]]:
        """[(first batch, last batch, γ)] of consecutive batch sizes with the same γ, covering 1..B_max."""
        out: list[list[int]] = []
        for c in self.choices:
            if out and out[-1][2] == c.gamma:
                out[-1][1] = c.batch_size
            else:
                out.append([c.batch_size, c.batch_size, c.gamma])
        return [tuple(r) for r in out]

    def schedule_rows(self) -> list[dict]:
        """The schedule split also where fitting in memory changes: [{first_batch, last_batch, gamma, fits}]
        (fits: weights + KV cache of that many sequences fit the device; False rows are not a recommendation,
        an engine cannot hold that many sequences at this context)."""
        out: list[dict] = []
        for c in self.choices:
            if out and out[-1]["gamma"] == c.gamma and out[-1]["fits"] == c.fits_memory:
                out[-1]["last_batch"] = c.batch_size
            else:
                out.append(
                    {"first_batch": c.batch_size, "last_batch": c.batch_size, "gamma": c.gamma}
                    | {"fits": c.fits_memory}
                )
        return out

    def schedule_text(self) -> str:
        """'1..104: 5; 105..256: 5, does NOT fit' from :meth:`schedule_rows`."""
        return "; ".join(
            (
                f"{r['first_batch']}"
                if r["first_batch"] == r["last_batch"]
                else f"{r['first_batch']}..{r['last_batch']}"
            )
            + f": {r['gamma']}"
            + ("" if r["fits"] else ", does NOT fit")
            for r in self.schedule_rows()
        )

    def to_json(self) -> dict:
        return {
            "schema_version": 2,  # 2: schedule rows are objects with "fits"; "notes" added
            "method": self.method,
            "scenario": self.scenario,
            "device": self.device,
            "context_tokens": self.context_tokens,
            "gamma_max": self.gamma_max,
            "min_speedup": self.min_speedup,
            "table": [
                asdict(self.at(b)) | {"extrapolated": self.at(b).extrapolated} for b in self.shown_batches
            ],
            "measured_gamma": self.measured_gamma,
            "schedule": self.schedule_rows(),
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
        }


def _plan(mt: MethodTau, lm: LatencyModel, max_batch: int, context_tokens: int) -> Plan:
    return plan_hardware(
        lm.target,
        lm.draft,
        [lm.device],
        [mt],
        efficiency=lm.efficiency,
        batches=range(1, max_batch + 1),
        contexts=(context_tokens,),
        notes=lm.notes,
        draft_kind=lm.draft_kind,
    )


def _check(batches, context_tokens: int, gamma_max: int, min_speedup: float) -> list[int]:
    shown = sorted({int(b) for b in batches})
    if not shown or shown[0] < 1:
        raise SpecsimError(f"batch sizes: expected integers >= 1, got {list(batches)!r}")
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens < 0:
        raise SpecsimError(f"context tokens: expected an integer >= 0, got {context_tokens!r}")
    if isinstance(gamma_max, bool) or not isinstance(gamma_max, int) or gamma_max < 1:
        raise SpecsimError(f"gamma max: expected an integer >= 1, got {gamma_max!r}")
    if not min_speedup > 0:
        raise SpecsimError(f"min speedup: expected a number > 0, got {min_speedup!r}")
    return shown


def acceptance_of(source: MethodAcceptance | Acceptance) -> Acceptance:
    """A profile entry as the one acceptance source (an :class:`Acceptance` passes through)."""
    return of_entry(source) if isinstance(source, MethodAcceptance) else source


def measured_gamma(acc: Acceptance) -> int | None:
    """K: the γ the evidence was measured or given at (an entry's own; None for an i.i.d. α)."""
    return acc.entry.gamma if acc.entry is not None else acc.k


def default_gamma_max(entry: MethodAcceptance | Acceptance) -> int:
    """Largest γ the CLI tries when not told: as far as τ is exact, up to :data:`DEFAULT_GAMMA_MAX`.

    An entry with greedy traces replays τ at any γ exactly: max(K, 8). An entry known only up to its K
    (imported engine counters, a published τ): K, since τ past K would be extrapolated at τ(K)'s i.i.d. α,
    optimistic where acceptance falls with depth, and a config would be written from it; the recommendation
    says so and ``--gamma-max`` (the library's ``gamma_max``) searches further, flagged."""
    acc = acceptance_of(entry)
    k = measured_gamma(acc)
    if k is None or not _iid_at(acc, k + 1):
        return max(k or 0, DEFAULT_GAMMA_MAX)
    return k


def _iid_at(acc: Acceptance, gamma: int) -> bool:
    """Whether τ at ``gamma`` is no measurement: extrapolated, or past a τ = γ+1 that says nothing of it."""
    try:
        return extrapolated(acc.tau_with_source(gamma)[1])
    except SpecsimError:
        return True


def recommend(
    entry: MethodAcceptance | Acceptance,
    lm: LatencyModel,
    *,
    batches=DEFAULT_SHOWN_BATCHES,
    context_tokens: int = 1024,
    gamma_max: int | None = None,
    min_speedup: float = 1.0,
) -> Recommendation:
    """Best γ (0 = off) for every batch size 1..max(batches); γ tried 1..gamma_max (default: the entry's
    K; the CLI passes :func:`default_gamma_max`)."""
    acc = acceptance_of(entry)
    k = measured_gamma(acc)
    gamma_max = k if gamma_max is None else gamma_max
    if gamma_max is None:
        raise SpecsimError(f"method {acc.method!r}: the entry has no measured gamma; pass a gamma max")
    shown = _check(batches, context_tokens, gamma_max, min_speedup)
    mt = acc.method_tau(range(1, gamma_max + 1))
    plan = _plan(mt, lm, shown[-1], context_tokens)
    choices = tuple(
        BatchChoice(
            batch_size=r.batch_size,
            gamma=r.best_gamma if r.speedup >= min_speedup else 0,
            speedup=r.speedup if r.speedup >= min_speedup else 1.0,
            best_gamma=r.best_gamma,
            best_speedup=r.speedup,
            tau=r.tau,
            tau_source=r.tau_source,
            c=r.c,
            v=r.v,
            fits_memory=r.fits_memory,
            o=r.o,
            o_terms=r.o_terms,
        )
        for r in sorted(plan.rows, key=lambda r: r.batch_size)
    )
    past_k = _extrapolated_past_k(k, mt)
    # the plan's context line and its v < 1 note (over every batch) give way to this recommendation's own
    assumptions = tuple(
        a for a in plan.assumptions if not a.startswith((_PLAN_CONTEXT_LINE, V_BELOW_ONE))
    ) + (
        f"SD is turned off (draft length 0) where the best predicted speedup is below {min_speedup:g}",
        "batch size = sequences decoding together in one engine step (concurrency), every size "
        f"1..{shown[-1]} evaluated",
        f"context = {context_tokens} tokens already in each sequence's KV cache "
        f"({image_tokens_note(lm.target)})",
        f"draft lengths tried: 1..{gamma_max}"
        + (
            f" (tau beyond the measured K = {k} is an i.i.d. extrapolation)"
            if past_k
            else f" (tau beyond the measured K = {k} replayed from the profile's traces)"
            if k and gamma_max > k
            else ""
        ),
    )
    notes = (  # fit and γ over every batch evaluated (the schedule's); v over the rows printed
        _fit_note(
            choices,
            lm.device.name,
            context_tokens,
            gamma_max,
            plan.crossover(lm.device.name, mt.method, context_tokens),
        ),
        _past_k_note(k, past_k, choices),
        _boundary_note(acc, gamma_max, choices),
        v_below_one_note([c for c in choices if c.batch_size in set(shown)], lm.efficiency),
    )
    return Recommendation(
        acc.method,
        acc.scenario,
        lm.device.name,
        context_tokens,
        gamma_max,
        min_speedup,
        choices,
        tuple(shown),
        assumptions,
        k,
        tuple(n for n in notes if n),
    )


def _ranges(batches: list[int]) -> str:
    """'1, 3..5' for [1, 3, 4, 5]."""
    out: list[list[int]] = []
    for b in batches:
        if out and b == out[-1][1] + 1:
            out[-1][1] = b
        else:
            out.append([b, b])
    return ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in out)


def _fit_note(choices, device: str, context_tokens: int, gamma_max: int, limit) -> str | None:
    no = [c.batch_size for c in choices if not c.fits_memory]
    if not no:
        return None
    largest = (
        f" (the largest that fits is {limit.largest_fitting_batch}, where SD gives "
        f"{limit.speedup_at_largest_fitting:.2f}x)"
        if limit.speedup_at_largest_fitting is not None
        else ""
    )
    return (
        f"batch sizes {_ranges(no)} do not fit on {device}{largest}: target and draft weights + KV cache of "
        f"{context_tokens} + {gamma_max} + 1 tokens per sequence exceed {USABLE_MEMORY_FRACTION:.0%} of its "
        "memory, so an engine cannot run that many sequences at this context; their draft lengths (fits NO) "
        "are what SD would give if they did, not a recommendation"
    )


def _extrapolated_past_k(k: int | None, mt: MethodTau) -> list[int]:
    """γ > K whose τ is an i.i.d. extrapolation from τ(K) (not replayed from traces)."""
    k = k or 0
    return [g for g, src in zip(mt.gammas, mt.tau_source) if g > k and extrapolated(src)]


def _past_k_note(k: int | None, past_k: list[int], choices) -> str | None:
    if not past_k:
        return None
    chosen = [c.batch_size for c in choices if c.gamma > k]
    return (
        f"draft lengths {_ranges(past_k)} lie past the measured K = {k}: their tau carries the i.i.d. "
        f"alpha of tau({k}) (extrapolated, marked *; optimistic where acceptance falls with depth)"
        + (
            f"; chosen at batch {_ranges(chosen)}: serve with that K and import again to measure it"
            if chosen
            else "; none is chosen (longer drafts do not pay here)"
        )
    )


def _boundary_note(acc: Acceptance, gamma_max: int, choices) -> str | None:
    """Where the search stopped at K (τ past it not exact), or the best γ sits at the largest tried."""
    at_max = [c.batch_size for c in choices if c.best_gamma == gamma_max]
    best = (
        f"; the best is {gamma_max} at batch {_ranges(at_max)}, so a longer draft may pay" if at_max else ""
    )
    if gamma_max == measured_gamma(acc) and _iid_at(acc, gamma_max + 1):
        return (
            f"draft lengths tried 1..{gamma_max} = the measured K only: tau past K = {gamma_max} would be "
            f"extrapolated (each later draft accepted at the i.i.d. alpha of tau({gamma_max})), so it is not "
            f"searched by default{best}; "
            "--gamma-max N searches further (marked *), or serve with a larger K and import again"
        )
    if not at_max:
        return None
    past = (
        f" (tau past the measured K = {measured_gamma(acc)} is extrapolated)"
        if _iid_at(acc, gamma_max + 1)
        else ""
    )
    return (
        f"the best draft length is the largest tried ({gamma_max}) at batch {_ranges(at_max)}: longer "
        f"drafts were not searched; --gamma-max N widens the search{past}"
    )


def fixed_gamma_speedups(
    entry: MethodAcceptance | Acceptance, lm: LatencyModel, gamma: int, *, max_batch: int, context_tokens: int
) -> list[tuple[int, float]]:
    """[(batch, speedup at this one γ)] for batch 1..max_batch: what an engine with one fixed γ gets."""
    plan = _plan(acceptance_of(entry).method_tau((gamma,)), lm, max_batch, context_tokens)
    return [(r.batch_size, r.speedup) for r in sorted(plan.rows, key=lambda r: r.batch_size)]


def fixed_gamma_note(
    speedups: list[tuple[int, float]],
    gamma: int,
    min_speedup: float = 1.0,
    flag: str = "--speculative-num-steps",
) -> str:
    """Where one fixed γ's ``speedups`` [(batch, speedup)] fall below ``min_speedup``, every such batch
    named (:func:`specsim.hardware.batch_limit.paying_runs`); ``flag`` sets that γ in the engine."""
    runs = paying_runs([b for b, _ in speedups], [s for _, s in speedups], min_speedup)
    head = f"with {flag} {gamma}, SD is predicted"
    if all(r.pays for r in runs):
        return f"{head} to pay at every batch size evaluated"
    return (
        f"{head} below {min_speedup:g}x at batch {runs_text(runs, False)}: cap concurrency or serve "
        "without SD there"
    )
