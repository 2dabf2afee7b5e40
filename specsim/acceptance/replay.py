"""Exact greedy replay of acceptance traces: τ(γ), accepted-length histograms and survival curves.

``match[t]`` = 1 when the draft's argmax equals the target's token at output position t (teacher-forced on
the target's greedy output); it fixes greedy SD exactly, for every γ at once. Closed form, no per-block loop:
every mismatch ends a block, so the trace splits after each mismatch (and at each prompt's end) into
segments; a segment of L positions takes ceil(L / (γ+1)) blocks, and τ = positions / blocks. Vectorised
over positions, prompts and γ. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from specsim.acceptance.theory import as_gammas
from specsim.errors import SpecsimError


def _as_match(match, where: str = "match") -> np.ndarray:
    m = np.asarray(match)
    if m.ndim != 1:
        raise SpecsimError(f"{where}: expected a 1-D array of 0/1, got shape {m.shape}")
    if m.dtype != bool:
        if m.size and not np.all((m == 0) | (m == 1)):
            raise SpecsimError(f"{where}: expected only 0 and 1 values")
        m = m.astype(bool)
    return m


def trace_arrays(traces, field: str, parse, missing: str) -> list[np.ndarray]:
    """``parse(array, where)`` of each trace's ``field`` (``Trace`` objects or plain sequences, or one 1-D
    array); SpecsimError "traces[i]: ``missing``" when a trace lacks it, or when there are no traces."""
    if isinstance(traces, np.ndarray) and traces.ndim == 1:
        traces = [traces]
    out = []
    for i, t in enumerate(traces):
        value = getattr(t, field, t)
        if value is None:
            raise SpecsimError(f"traces[{i}]: {missing}")
        out.append(parse(value, f"traces[{i}].{field}"))
    if not out:
        raise SpecsimError("traces: expected at least one trace, got none")
    return out


def _match_arrays(traces) -> list[np.ndarray]:
    """Match arrays from ``Trace`` objects (their ``match``) or from plain 0/1 sequences."""
    return trace_arrays(
        traces, "match", _as_match, "no greedy 'match' trace (only beta); use specsim.acceptance.montecarlo"
    )


def segment_lengths(matches: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(L, prompt index) of every segment: the trace cut after each mismatch and at each prompt's end."""
    lengths = np.array([m.size for m in matches], dtype=np.int64)
    if lengths.sum() == 0:
        raise SpecsimError("traces: expected at least one position, got only empty traces")
    flat = np.concatenate(matches) if len(matches) > 1 else matches[0]
    ends_mask = ~flat
    prompt_ends = np.cumsum(lengths) - 1
    ends_mask[prompt_ends[lengths > 0]] = True
    ends = np.flatnonzero(ends_mask)
    seg = np.diff(ends, prepend=-1)
    prompt = np.searchsorted(prompt_ends, ends)
    return seg, prompt


def _blocks(seg: np.ndarray, gammas: np.ndarray) -> np.ndarray:
    """Blocks per segment for each γ: ceil(L / (γ+1)), shape gammas.shape + seg.shape."""
    g1 = gammas[..., None] + 1
    return (seg + g1 - 1) // g1


def replay_tau(match, gamma):
    """τ(γ) of one prompt's greedy trace = positions / blocks (γ may be an array)."""
    return replay_traces_tau([match], gamma)


def replay_traces_tau(traces, gamma):
    """τ(γ) over all prompts = total tokens emitted / total blocks (γ may be an array of γ)."""
    seg, _ = segment_lengths(_match_arrays(traces))
    g = as_gammas(gamma)
    out = seg.sum() / _blocks(seg, g).sum(axis=-1)
    return out if np.ndim(out) else float(out)


def replay_blocks_per_prompt(traces, gamma: int) -> np.ndarray:
    """Number of blocks greedy SD at ``gamma`` spends on each prompt (int array, one per trace)."""
    matches = _match_arrays(traces)
    seg, prompt = segment_lengths(matches)
    g = as_gammas(gamma)
    if g.ndim:
        raise SpecsimError(f"gamma: expected one integer here, got {gamma!r}")
    return np.bincount(prompt, weights=_blocks(seg, g), minlength=len(matches)).astype(np.int64)


def replay_tau_per_prompt(traces, gamma: int) -> np.ndarray:
    """τ(γ) of each prompt (NaN for an empty trace)."""
    matches = _match_arrays(traces)
    blocks = replay_blocks_per_prompt(matches, gamma)
    sizes = np.array([m.size for m in matches], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(blocks > 0, sizes / np.maximum(blocks, 1), np.nan)


def replay_histogram(traces, gamma: int) -> np.ndarray:
    """h[k] = blocks that accepted exactly k drafts, k = 0..γ (the last block of a prompt is
    capped by the tokens left, as the engine caps its γ there)."""
    seg, _ = segment_lengths(_match_arrays(traces))
    g = int(as_gammas(gamma))
    blocks = _blocks(seg, np.asarray(g))
    last_accepted = seg - (blocks - 1) * (g + 1) - 1  # tokens of the last block, minus its target token
    hist = np.bincount(last_accepted, minlength=g + 1).astype(np.int64)
    hist[g] += int((blocks - 1).sum())
    return hist


def replay_survival(traces, gamma: int) -> np.ndarray:
    """a_i = P(a block accepts ≥ i drafts), i = 1..γ, from the replayed histogram."""
    hist = replay_histogram(traces, gamma).astype(float)
    tail = np.cumsum(hist[::-1])[::-1]
    return tail[1:] / hist.sum()


def match_rate_by_position(traces, max_positions: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rate[t], prompts[t]): fraction of prompts whose draft matches at output position t, and how
    many prompts reach t — acceptance as a function of position in the answer."""
    matches = _match_arrays(traces)
    n = max(m.size for m in matches) if max_positions is None else int(max_positions)
    hits = np.zeros(n)
    count = np.zeros(n)
    for m in matches:
        k = min(m.size, n)
        hits[:k] += m[:k]
        count[:k] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, hits / np.maximum(count, 1), np.nan), count.astype(np.int64)


def replay_block_starts(match, gamma: int) -> list[int]:
    """Reference implementation, block by block: the output positions where blocks start.

    Slow (a Python loop); kept as the second implementation the vectorised form is tested against.
    """
    m = _as_match(match)
    g = int(as_gammas(gamma))
    starts, t, n = [], 0, m.size
    while t < n:
        starts.append(t)
        cap = min(g, n - t - 1)
        run = 0
        while run < cap and m[t + run]:
            run += 1
        t += run + 1
    return starts


def tau_table(traces, gammas: Iterable[int]) -> dict[int, float]:
    """{γ: τ(γ)} for several γ at once."""
    gs = [int(g) for g in gammas]
    taus = np.atleast_1d(replay_traces_tau(traces, np.asarray(gs)))
    return dict(zip(gs, (float(t) for t in taus)))
