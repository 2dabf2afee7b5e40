"""vLLM (V1 engine) speculative-decoding counters -> accepted-length histogram at K, survival a_i, τ(k ≤ K).

``per_pos[i]`` counts drafts (verification steps that carried drafts) that accepted at least i+1 tokens:
a_i = per_pos[i-1] / drafts (i = 1..K); h[j] = per_pos[j-1] - per_pos[j] (h[0] = drafts - per_pos[0],
h[K] = per_pos[K-1]); τ at K = 1 + accepted / drafts (bonus included); acceptance rate = accepted /
draft_tokens. Counters are cumulative since the server started: two scrapes give the window between them.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.acceptance.theory import survival_from_histogram, tau_from_histogram_at
from specsim.bounds import MAX_GAMMA
from specsim.engines.metric_samples import (
    Sample,
    check_unique,
    duplicate_series,
    models_of,
    of_model,
    pick_model,
    read_metrics,
)
from specsim.errors import SpecsimError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
POSITION_LABEL = "position"
# vLLM V0 reported rates as gauges and no per-position counts (vllm/engine/metrics.py, V0).
LEGACY_V0 = (
    "vllm:spec_decode_draft_acceptance_rate",
    "vllm:spec_decode_efficiency",
    "vllm:spec_decode_num_emitted_tokens",
)


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's four spec-decode counters for one model (summed over engines), K = len(per_pos)."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]

    @property
    def k(self) -> int:
        """K: draft positions reported (``num_speculative_tokens`` of the server)."""
        return len(self.accepted_per_pos)

    def minus(self, earlier: SpecCounters, where: str) -> SpecCounters:
        """The window between two scrapes (``self`` is the later one); a counter that fell is a reset."""
        if earlier.k != self.k:
            raise SpecsimError(
                f"{where}: K disagrees between the scrapes ({earlier.k} positions, then {self.k})"
            )
        pairs = [
            (DRAFTS, earlier.drafts, self.drafts),
            (DRAFT_TOKENS, earlier.draft_tokens, self.draft_tokens),
            (ACCEPTED, earlier.accepted, self.accepted),
        ]
        pairs += [
            (f'{PER_POS}{{position="{i}"}}', a, b)
            for i, (a, b) in enumerate(zip(earlier.accepted_per_pos, self.accepted_per_pos))
        ]
        for name, a, b in pairs:
            if b < a:
                raise SpecsimError(
                    f"{where}: counter reset between the scrapes: {name} went down from {a} to {b} "
                    "(server restarted, or the files are in the wrong order: earlier scrape first)"
                )
        return SpecCounters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            tuple(b - a for a, b in zip(earlier.accepted_per_pos, self.accepted_per_pos)),
        )

    def check(self, where: str) -> SpecCounters:
        """Self, after the identities vLLM's counting guarantees; SpecsimError naming the first broken one."""
        k, pos = self.k, self.accepted_per_pos
        if self.drafts == 0:
            raise SpecsimError(
                f"{where}: zero drafts ({DRAFTS} = 0): no speculative decoding happened in this "
                "window, so there is no acceptance to import"
            )
        # Drafts but no draft token: refused rather than given a value. vLLM counts a draft when it
        # verified draft tokens (the scheduler skips steps with none; newer versions subtract drafts a
        # grammar rejected, so a draft may carry 0). A window whose drafts carried no token holds no
        # acceptance evidence at all: the rate accepted/draft_tokens is 0/0, and the histogram would
        # claim tau = 1 (every draft rejected at once), a measurement nobody made.
        if self.draft_tokens == 0:
            raise SpecsimError(
                f"{where}: {DRAFTS} = {self.drafts} but {DRAFT_TOKENS} = 0: no draft tokens were "
                "proposed or verified in this window, so there is no acceptance to import "
                "(expected at least one draft token; the acceptance rate would be 0/0)"
            )
        if pos[0] > self.drafts:
            raise SpecsimError(
                f'{where}: {PER_POS}{{position="0"}} = {pos[0]} exceeds {DRAFTS} = {self.drafts}'
            )
        for i in range(1, k):
            if pos[i] > pos[i - 1]:
                raise SpecsimError(
                    f"{where}: per-position counts must not increase, but position {i} has "
                    f"{pos[i]} > position {i - 1} with {pos[i - 1]}"
                )
        if sum(pos) != self.accepted:
            raise SpecsimError(
                f"{where}: the accepted tokens disagree between counters: {ACCEPTED} = {self.accepted}, but "
                f"the per-position counts of positions 0..{k - 1} sum to {sum(pos)} (counters scraped at "
                f"different moments, or positions past K = {k} not reported)"
            )
        if self.draft_tokens > k * self.drafts:
            raise SpecsimError(
                f"{where}: K disagrees between counters: {DRAFT_TOKENS} = {self.draft_tokens} is more "
                f"than K x {DRAFTS} = {k} x {self.drafts}, but only K = {k} positions are reported"
            )
        if self.accepted > self.draft_tokens:
            raise SpecsimError(
                f"{where}: {ACCEPTED} = {self.accepted} exceeds {DRAFT_TOKENS} = {self.draft_tokens}"
            )
        return self

    def histogram(self) -> tuple[int, ...]:
        """h[j] = drafts that accepted exactly j of K tokens, j = 0..K."""
        at_least = (self.drafts, *self.accepted_per_pos, 0)
        return tuple(at_least[j] - at_least[j + 1] for j in range(self.k + 1))

    def survival(self) -> np.ndarray:
        """a_i = P(at least i drafts accepted), i = 1..K."""
        return survival_from_histogram(self.histogram())

    def tau(self, k: int) -> float:
        """τ(k) = 1 + Σ_{i≤k} a_i for k ≤ K, exact (one integer ratio)."""
        return tau_from_histogram_at(self.histogram(), k)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts (vLLM's log line and docs; bonus token included) = τ(K)."""
        return 1.0 + self.accepted / self.drafts

    @property
    def acceptance_rate(self) -> float:
        """accepted / draft tokens (vLLM's 'Avg Draft acceptance rate'); :meth:`check` ensures a token."""
        if self.draft_tokens == 0:
            raise SpecsimError(f"acceptance rate: zero draft tokens ({self.accepted}/0 is undefined)")
        return self.accepted / self.draft_tokens

    @property
    def full_drafts_fraction(self) -> float:
        """draft_tokens / (K · drafts): 1 when every draft proposed all K tokens."""
        return self.draft_tokens / (self.k * self.drafts)


MAX_COUNT = 2**53  # the largest count a Prometheus (float64) value holds exactly


def _count(value: float, what: str, where: str) -> int:
    """A counter value as an int: whole, >= 0 and <= 2**53 (beyond it a float64 is no exact count, so
    the counters' identities cannot be checked, and the histogram would not fit a profile's integers)."""
    if not math.isfinite(value) or value < 0 or value != int(value) or value > MAX_COUNT:
        raise SpecsimError(f"{where}: {what}: expected a non-negative whole count up to 2**53, got {value:g}")
    return int(value)


def _scalar(samples: list[Sample], name: str, model: str, where: str) -> int:
    found = of_model(samples, name, model)
    check_unique(found, where)
    if not found:
        raise SpecsimError(
            f"{where}: no {name} counter for model {model or '(unlabelled)'!r} "
            "(was speculative decoding enabled?)"
        )
    return sum(_count(s.value, name, where) for s in found)


def _position(s: Sample, where: str) -> int:
    """The draft position of a per-position sample: decimal 0..MAX_GAMMA-1, checked before any use.

    vLLM numbers positions 0..K-1 (K = num_speculative_tokens); specsim accepts K <= MAX_GAMMA, so a
    larger label (or one written another way, e.g. '03', which would alias position 3) is refused here,
    before anything is sized by it.
    """
    pos = s.label(POSITION_LABEL)
    if pos is None:
        raise SpecsimError(f"{where}: a {PER_POS} sample has no position label (labels: {dict(s.labels)})")
    canonical = len(pos) <= len(str(MAX_GAMMA)) and pos.isascii() and pos.isdigit() and str(int(pos)) == pos
    if not canonical or int(pos) >= MAX_GAMMA:
        shown = pos if len(pos) <= 40 else pos[:37] + "..."
        raise SpecsimError(
            f"{where}: {PER_POS}: position label {shown!r}: expected a draft position 0..{MAX_GAMMA - 1} "
            f"in plain decimal (vLLM numbers positions 0..K-1, K = num_speculative_tokens <= {MAX_GAMMA})"
        )
    return int(pos)


def _per_position(samples: list[Sample], model: str, where: str) -> tuple[int, ...]:
    """Per-position counts summed over engines; every engine must report the same positions 0..K-1."""
    groups: dict[tuple, dict[int, int]] = {}
    for s in of_model(samples, PER_POS, model):
        pos = _position(s, where)
        by_pos = groups.setdefault(tuple(kv for kv in s.labels if kv[0] != POSITION_LABEL), {})
        if pos in by_pos:  # same engine, same position: the series twice (positions are canonical)
            raise duplicate_series(s, where)
        by_pos[pos] = _count(s.value, f"{PER_POS}[{pos}]", where)
    if not groups:
        raise SpecsimError(f"{where}: no {PER_POS} counter for model {model or '(unlabelled)'!r}")
    ks = set()
    for by_pos in groups.values():
        k = max(by_pos) + 1
        missing = [i for i in range(k) if i not in by_pos]
        if missing:
            raise SpecsimError(
                f"{where}: {PER_POS}: position {missing[0]} is missing (positions present: "
                f"{', '.join(str(p) for p in sorted(by_pos))})"
            )
        ks.add(k)
    if len(ks) > 1:
        raise SpecsimError(
            f"{where}: K disagrees between engines: per-position counters for {sorted(ks)} positions"
        )
    k = ks.pop()
    return tuple(sum(g[i] for g in groups.values()) for i in range(k))


def counters_from_samples(samples: list[Sample], model: str, where: str) -> SpecCounters:
    """The four counters of ``model`` (summed over the ``engine`` label)."""
    return SpecCounters(
        _scalar(samples, DRAFTS, model, where),
        _scalar(samples, DRAFT_TOKENS, model, where),
        _scalar(samples, ACCEPTED, model, where),
        _per_position(samples, model, where),
    )


def _models(samples: list[Sample], where: str) -> list[str]:
    models = models_of(samples, (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS))
    if not models:
        legacy = sorted({s.name for s in samples if s.name in LEGACY_V0})
        hint = (
            f"only vLLM V0 metrics ({', '.join(legacy)}), which carry no per-position counts; upgrade to the "
            "V1 engine"
            if legacy
            else f"no {DRAFTS}; is speculative decoding enabled on this server"
        )
        raise SpecsimError(f"{where}: no vLLM spec-decode counters ({hint})")
    return models


def read_counters(
    paths: list[str | Path], *, model: str | None = None, num_speculative_tokens: int | None = None
) -> tuple[SpecCounters, str]:
    """(counters of the window, model name) from one scrape (since start) or two (their difference)."""
    if not 1 <= len(paths) <= 2:
        raise SpecsimError(f"vLLM import: expected one or two metrics files, got {len(paths)}")
    scrapes = [read_metrics(p) for p in paths]
    where_last = f"metrics file {str(paths[-1])!r}"
    chosen = pick_model(_models(scrapes[-1], where_last), model, where_last)
    counters = [counters_from_samples(s, chosen, f"metrics file {str(p)!r}") for s, p in zip(scrapes, paths)]
    if len(paths) == 2:
        where = f"delta {str(paths[1])!r} - {str(paths[0])!r}"
        window = counters[1].minus(counters[0], where)
    else:
        where, window = where_last, counters[0]
    if num_speculative_tokens is not None and num_speculative_tokens != window.k:
        raise SpecsimError(
            f"--num-speculative-tokens: the server was said to draft {num_speculative_tokens}, but "
            f"its counters report {window.k} positions (K disagrees)"
        )
    return window.check(where), chosen
