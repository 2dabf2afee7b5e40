"""Speculative decoding per serving step: how many drafts (γ policy) and how many are accepted.

γ per step: :class:`specsim.draft_shapes.policies.GammaPolicy` keyed on the step's decode batch B (a fixed γ,
ranges by batch size as vLLM's ``num_speculative_tokens_per_batch_size``, or SD off from a batch size up).
Accepted drafts per request per block (an :class:`AcceptanceSource`), vectorised over the step's requests:
:class:`IidAcceptance` (accepted = min(G − 1, drafts), G ~ Geometric(1 − α)) and :class:`ReplayAcceptance`
(the run of greedy-trace matches from the block's first draft position, capped at its drafts).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specsim.acceptance.theory import alpha_from_tau, survival_past
from specsim.bounds import interval_arg
from specsim.errors import SpecsimError


class AcceptanceSource(Protocol):
    """Accepted drafts of one block per request (vectorised over a step's decoding requests)."""

    def accepted(
        self, requests: np.ndarray, positions: np.ndarray, drafts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Accepted drafts (0..drafts) for ``requests`` (indices) whose block starts at output
        ``positions`` with ``drafts`` drafts each."""
        ...


@dataclass(frozen=True)
class IidAcceptance:
    """Each draft accepted with probability ``alpha`` independently (0 <= alpha <= 1; 1: a τ of γ+1 given,
    every draft accepted)."""

    alpha: float

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha <= 1.0):
            raise SpecsimError(f"alpha: expected 0 <= alpha <= 1, got {self.alpha!r}")

    def _leading(self, rng, size) -> np.ndarray:
        """Drafts accepted before the first rejection (no rejection at α = 1)."""
        if self.alpha >= 1.0:
            return np.full(size, np.iinfo(np.int64).max)
        return rng.geometric(1.0 - self.alpha, size=size) - 1

    def accepted(self, requests, positions, drafts, rng) -> np.ndarray:
        return np.minimum(self._leading(rng, len(requests)), drafts)

    def accepted_steps(self, requests: int, gamma: int, steps: int, rng) -> np.ndarray:
        """[steps, requests] accepted drafts of ``steps`` consecutive blocks of γ drafts at once (the draws do
        not depend on positions, so the simulator may take several steps in one call)."""
        return np.minimum(self._leading(rng, (steps, requests)), gamma)


@dataclass(frozen=True)
class ReplayAcceptance:
    """Request r follows trace ``trace_of[r % len(trace_of)]`` (default: trace r mod the number of traces);
    ``runs[i, t]`` = matches in a row from t in trace i (wrapping), built by :meth:`from_matches`."""

    runs: np.ndarray  # [traces, longest trace], int64; padding beyond a trace's length is unused
    lengths: np.ndarray  # [traces]
    trace_of: np.ndarray | None = None

    @classmethod
    def from_matches(cls, matches: Sequence, trace_of=None) -> ReplayAcceptance:
        """From greedy 0/1 match arrays, one per traced prompt (each non-empty)."""
        from specsim.acceptance.replay import trace_arrays

        def parse(value, where):
            m = np.asarray(value)
            if m.ndim != 1 or m.size == 0 or not np.all((m == 0) | (m == 1)):
                raise SpecsimError(f"{where}: expected a non-empty 1-D array of 0/1")
            return m.astype(bool)

        arrays = trace_arrays(matches, "match", parse, "no greedy 'match' trace")
        lengths = np.array([len(m) for m in arrays], dtype=np.int64)
        runs = np.zeros((len(arrays), int(lengths.max())), dtype=np.int64)
        for i, m in enumerate(arrays):
            runs[i, : len(m)] = _runs_wrapping(m)
        if trace_of is not None:
            trace_of = np.asarray(trace_of, dtype=np.int64)
            if trace_of.size == 0 or trace_of.min() < 0 or trace_of.max() >= len(arrays):
                raise SpecsimError(f"trace_of: expected trace indices in 0..{len(arrays) - 1}")
        return cls(runs, lengths, trace_of)

    def accepted(self, requests, positions, drafts, rng) -> np.ndarray:
        requests = np.asarray(requests, dtype=np.int64)
        traces = (
            requests % len(self.lengths)
            if self.trace_of is None
            else self.trace_of[requests % len(self.trace_of)]
        )
        run = self.runs[traces, np.asarray(positions) % self.lengths[traces]]
        return np.minimum(run, drafts)


@dataclass(frozen=True)
class SurvivalAcceptance:
    """Accepted drafts of a block drawn from a survival curve ``survival`` = (a_1..a_K), a_i = P(at least i
    drafts accepted): one uniform u per block, accepted = #{i <= γ: u < a_i} (exact for γ <= K: the first γ
    drafts of a K-draft block are the γ a γ-block proposes). Past K, as τ is carried there
    (:func:`specsim.acceptance.theory.survival_past`): each later draft accepted at ``alpha_past_k``, the α
    of τ(K)."""

    survival: tuple[float, ...]
    alpha_past_k: float

    def accepted(self, requests, positions, drafts, rng) -> np.ndarray:
        drafts = np.asarray(drafts)
        return np.minimum(self.accepted_steps(len(requests), int(drafts.max(initial=0)), 1, rng)[0], drafts)

    def accepted_steps(self, requests: int, gamma: int, steps: int, rng) -> np.ndarray:
        """[steps, requests] accepted drafts of blocks of γ drafts (draws do not depend on positions)."""
        u = rng.random(size=(steps, requests))
        return (u[..., None] < survival_past(self.survival, self.alpha_past_k, gamma)).sum(axis=-1)


def serving_source(acceptance) -> AcceptanceSource:
    """The serving draws of an :class:`specsim.predict.acceptance_source.Acceptance`: its traces replayed, a
    survival curve (per-position rates, a histogram: imported engine counters), else i.i.d. α."""
    if acceptance.has_traces:
        return replay_of(acceptance.entry)
    survival = acceptance.survival_at_k()
    if survival is not None:
        return SurvivalAcceptance(tuple(float(x) for x in survival), acceptance.alpha_past_k())
    if acceptance.alpha is not None:
        return IidAcceptance(acceptance.alpha)
    entry = acceptance.entry  # a τ at its γ (tau_with_source refuses an entry without one)
    return IidAcceptance(float(alpha_from_tau(acceptance.tau_with_source(entry.gamma)[0], entry.gamma)))


def replay_of(entry) -> ReplayAcceptance:
    """Replay of a profile entry's greedy traces (a :class:`specsim.profile_format.MethodAcceptance`): request
    i
    follows traced prompt i mod n; SpecsimError when the entry has none."""
    matches = [t.match for t in entry.traces if t.match is not None]
    if not matches:
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: no greedy traces to replay "
            "(calibrate acceptance)"
        )
    return ReplayAcceptance.from_matches(matches)


def _runs_wrapping(match: np.ndarray) -> np.ndarray:
    """Matches in a row starting at each position, the trace read as a loop (all ones: its length)."""
    n = len(match)
    zeros = np.flatnonzero(~match)
    if zeros.size == 0:
        return np.full(n, n, dtype=np.int64)
    loop = np.concatenate([zeros, zeros + n])  # the next mismatch at or after t, across the wrap
    return loop[np.searchsorted(loop, np.arange(n))] - np.arange(n)


alpha_arg = interval_arg(0.0, 1.0, "0 <= alpha < 1", hi_open=True)  # an i.i.d. acceptance probability
