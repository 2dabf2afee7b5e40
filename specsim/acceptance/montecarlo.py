"""Monte Carlo of sampled speculative decoding from per-position β traces: τ and request latency, with CIs.

A draft at output position t is accepted with probability β_t = Σ_x min(p_t, q_t) (Leviathan et al. 2023,
§3.5), independently across positions. Each position is tried at most once, so m_t ~ Bernoulli(β_t) drawn
up front and replayed greedily (:mod:`specsim.acceptance.replay`) has exactly the sequential process's block
distribution: fully vectorised. β is one teacher-forced trace per prompt, an approximation
(:mod:`specsim.check.sampled` follows sampled paths instead). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import as_acceptance, as_gammas
from specsim.errors import SpecsimError


def central_interval(x: np.ndarray, ci: float) -> tuple[float, float]:
    """The central ``ci`` interval of samples ``x``: their (1 − ci)/2 and (1 + ci)/2 quantiles."""
    lo, hi = np.quantile(x, [(1 - ci) / 2, (1 + ci) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class MonteCarloResult:
    """Simulated runs of a prompt set at one γ.

    ``tau_samples`` [runs]: τ of each run (tokens / blocks over all prompts); ``blocks`` [runs,
    prompts]; ``latency_ms`` [runs, prompts] request latencies when block costs were given.
    CIs are central percentile intervals of the run-to-run distribution at level ``ci``.
    """

    gamma: int
    ci: float
    tau_samples: np.ndarray
    blocks: np.ndarray
    latency_ms: np.ndarray | None = None

    @property
    def tau_mean(self) -> float:
        return float(self.tau_samples.mean())

    @property
    def tau_ci(self) -> tuple[float, float]:
        return central_interval(self.tau_samples, self.ci)

    @property
    def latency_ms_mean(self) -> float | None:
        return None if self.latency_ms is None else float(self.latency_ms.mean())

    @property
    def latency_ms_ci(self) -> tuple[float, float] | None:
        """Interval of the mean request latency of a run (run-to-run spread)."""
        return None if self.latency_ms is None else central_interval(self.latency_ms.mean(axis=1), self.ci)

    def request_latency_ms_interval(self) -> tuple[float, float] | None:
        """Interval of a single request's latency (all prompts and runs pooled)."""
        return None if self.latency_ms is None else central_interval(self.latency_ms.ravel(), self.ci)

    def to_json(self) -> dict:
        out = {
            "gamma": self.gamma,
            "ci": self.ci,
            "runs": int(self.tau_samples.size),
            "tau_mean": self.tau_mean,
            "tau_ci": list(self.tau_ci),
        }
        if self.latency_ms is not None:
            out |= {"latency_ms_mean": self.latency_ms_mean, "latency_ms_ci": list(self.latency_ms_ci)}
        return out


def _beta_arrays(traces) -> list[np.ndarray]:
    out = []
    for i, t in enumerate(traces):
        b = getattr(t, "beta", t)
        if b is None:
            raise SpecsimError(f"traces[{i}]: no 'beta' trace (greedy match only); sampling needs beta")
        b = np.asarray(b, dtype=float)
        if b.ndim != 1 or np.any(~np.isfinite(b)) or np.any(b < 0) or np.any(b > 1):
            raise SpecsimError(f"traces[{i}].beta: expected a 1-D array of probabilities in [0, 1]")
        out.append(b)
    if not out or sum(b.size for b in out) == 0:
        raise SpecsimError("traces: expected at least one beta trace with positions, got none")
    return out


def _blocks_per_run(matches: np.ndarray, gamma: int) -> np.ndarray:
    """Blocks of each row of a [runs, N] match matrix (segment form of specsim.acceptance.replay)."""
    runs, n = matches.shape
    if n == 0:
        return np.zeros(runs, dtype=np.int64)
    ends_mask = ~matches
    ends_mask[:, -1] = True
    ends = np.flatnonzero(ends_mask)
    seg = np.diff(ends, prepend=-1)  # rows never merge: each row's last column is an end
    blocks = (seg + gamma) // (gamma + 1)
    return np.bincount(ends // n, weights=blocks, minlength=runs).astype(np.int64)


def simulate(
    traces,
    gamma: int,
    *,
    rng: np.random.Generator,
    runs: int = 1000,
    ci: float = 0.95,
    block_ms: float | None = None,
    setup_ms=0.0,
    max_cells: int = 2_000_000,
) -> MonteCarloResult:
    """``runs`` simulated passes over the prompt set at γ; request latency = setup_ms + blocks·block_ms.

    ``block_ms`` = γ·Tq + Tv(γ) (ms); ``setup_ms`` scalar or one value per prompt (prefill, vision).
    Runs are simulated in chunks of ≤ ``max_cells`` random draws to bound memory.
    """
    g = int(as_gammas(gamma))
    if runs < 1 or not 0 < ci < 1:
        raise SpecsimError(f"runs and ci: expected runs >= 1 and 0 < ci < 1, got {runs} and {ci}")
    betas = _beta_arrays(traces)
    blocks = np.zeros((runs, len(betas)), dtype=np.int64)
    for j, b in enumerate(betas):
        step = max(1, max_cells // max(b.size, 1))
        for lo in range(0, runs, step):
            hi = min(runs, lo + step)
            m = rng.random((hi - lo, b.size)) < b
            blocks[lo:hi, j] = _blocks_per_run(m, g)
    tokens = sum(b.size for b in betas)
    tau = tokens / blocks.sum(axis=1)
    latency = None
    if block_ms is not None:
        setup = np.broadcast_to(np.asarray(setup_ms, dtype=float), (len(betas),))
        latency = setup[None, :] + blocks * float(block_ms)
    return MonteCarloResult(gamma=g, ci=ci, tau_samples=tau, blocks=blocks, latency_ms=latency)


def iid_beta_traces(alpha: float, positions: int, prompts: int = 1) -> list[np.ndarray]:
    """Synthetic traces with β_t = α everywhere (for checks against the i.i.d. closed form)."""
    if not 0 <= alpha <= 1 or positions < 1 or prompts < 1:
        raise SpecsimError(
            f"expected 0 <= alpha <= 1, positions >= 1, prompts >= 1, got {alpha}, {positions}, {prompts}"
        )
    return [np.full(positions, float(alpha)) for _ in range(prompts)]


def simulate_tree_tokens(tree, acceptance, *, rng: np.random.Generator, blocks: int = 100_000) -> np.ndarray:
    """Tokens emitted by ``blocks`` simulated blocks of a token tree (bonus included), shape (blocks,).

    Model of :mod:`specsim.draft_shapes.trees`: at depth d the target's token has draft rank r with
    probability acc[d-1, r] (the rest: no candidate has it), independently across depths; the block descends
    into the child of that rank while there is one. The mean estimates ``expected_tokens(tree, acc)``.
    """

    acc = as_acceptance(acceptance)
    if acc.ndim != 2:
        raise SpecsimError(f"acceptance: expected one (depth, rank) table, got shape {acc.shape}")
    if blocks < 1:
        raise SpecsimError(f"blocks: expected an integer >= 1, got {blocks!r}")
    table = tree.child_table()
    node = np.zeros(blocks, dtype=np.int64)
    alive = np.ones(blocks, dtype=bool)
    tokens = np.ones(blocks, dtype=np.int64)
    for d in range(tree.depth):
        row = acc[min(d, acc.shape[0] - 1)]
        probs = np.r_[row, max(0.0, 1.0 - row.sum())]  # the last outcome: a rank past every candidate
        r = rng.choice(probs.size, size=blocks, p=probs / probs.sum())
        none = table.shape[1] - 1  # the all -1 column
        child = table[node, np.where(r == row.size, none, np.minimum(r, none))]
        alive &= child >= 0
        node = np.where(alive, child, node)
        tokens += alive
    return tokens
