"""Dynamic draft length: policies that choose γ block by block, and their exact greedy replay.

A policy is a frozen description plus a pure transition, shared by the engine
(the calibrate half's speculative-decoding loop accepts one as ``gamma``) and the replay here, so both
run the same rule:

- ``initial_state()`` at the start of a request; ``next_gamma(state)`` the γ to draft this block
  (the engine still caps it at tokens left − 1); ``update(state, proposed, accepted)`` after the block;
- ``stop_below``: the drafter stops early, after the first draft whose draft probability (the
  top probability of the distribution it was drafted from; T = 1 when greedy) is below it (0 = never).

Policies (:func:`parse_policy`):

- ``fixed:5`` (or ``5``): γ = 5 always.
- ``heuristic[:G][,max=M]``: HF transformers' ``num_assistant_tokens_schedule="heuristic"``
  (``AssistedCandidateGenerator.update_candidate_strategy``): start at G (default 20, HF's
  ``num_assistant_tokens``); +2 after a block that accepted every draft it proposed, else −1,
  floor 1; M an optional cap. State resets per request (HF's "heuristic_transient").
- ``confidence:P[,gamma=G][,heuristic]``: HF's ``assistant_confidence_threshold`` = P with a fixed
  threshold (HF adapts it by an ROC fit when scikit-learn is installed; not modelled), drafting at
  most G (default 20) per block, or on the heuristic schedule from G.
- ``batch:1=5,8=3,32=0[@B]``: a per-batch-size table (the entry of the largest batch ≤ B, B = 1 by
  default); γ = 0 turns drafting off, as serving engines do at large batch.

Replay from greedy traces: a block starting at t drafts g = min(next_gamma, N-1-t), shortened to
the first offset i with top1[t+i] < P (that draft included), and accepts min(g, run of matches
from t). Drafts past the first mismatch never change the outcome, and every draft up to it sits on
the teacher-forced context, so the replay is exact whenever the traces' top-1 probabilities are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.bounds import MAX_GAMMA, RANGES
from specsim.drafts.block_plans import match_runs, token_budget
from specsim.drafts.tree_replay import ReplayBlock
from specsim.errors import SpecsimError
from specsim.jsonio import show

HF_NUM_ASSISTANT_TOKENS = 20  # transformers GenerationConfig default for assisted generation
MAX_BATCH = int(RANGES["batch"][1])


class _GammaIsState:
    """Policies whose state is the γ of the next block, starting from ``self.gamma``."""

    def initial_state(self) -> int:
        return self.gamma

    def next_gamma(self, state: int) -> int:
        return state


@dataclass(frozen=True)
class GammaPolicy(_GammaIsState):
    """γ per block by ``schedule`` "fixed" (always ``gamma``) or "heuristic" (HF's, from ``gamma``),
    capped at ``gamma_max`` when given; drafting stops early below draft probability ``stop_below``."""

    schedule: str = "fixed"
    gamma: int = 5
    stop_below: float = 0.0
    gamma_max: int | None = None

    def __post_init__(self):
        if self.schedule not in ("fixed", "heuristic"):
            raise SpecsimError(f"policy schedule: expected 'fixed' or 'heuristic', got {self.schedule!r}")
        _check_gamma(self.gamma, "gamma", lo=1)
        if self.gamma_max is not None:
            _check_gamma(self.gamma_max, "max", lo=self.gamma)
        if not 0.0 <= float(self.stop_below) < 1.0:
            raise SpecsimError(f"confidence: expected a probability in [0, 1), got {self.stop_below!r}")

    def update(self, state: int, proposed: int, accepted: int) -> int:
        """HF's rule: +2 when every proposed draft was accepted, else −1 (floor 1)."""
        if self.schedule == "fixed":
            return state
        state = state + 2 if accepted == proposed else max(1, state - 1)
        return state if self.gamma_max is None else min(state, self.gamma_max)

    def __str__(self) -> str:
        if self.stop_below > 0:
            text = f"confidence:{self.stop_below:g},gamma={self.gamma}"
            text += ",heuristic" if self.schedule == "heuristic" else ""
        else:
            text = f"{self.schedule}:{self.gamma}"
        return text + (f",max={self.gamma_max}" if self.gamma_max is not None else "")

    def to_json(self) -> dict:
        return {
            "policy": str(self),
            "schedule": self.schedule,
            "gamma": self.gamma,
            "stop_below": self.stop_below,
            "gamma_max": self.gamma_max,
        }


@dataclass(frozen=True)
class BatchTable(_GammaIsState):
    """γ from a table of (batch size, γ) rows: the row of the largest batch ≤ ``batch_size``."""

    table: tuple[tuple[int, int], ...]
    batch_size: int = 1
    stop_below: float = 0.0

    def __post_init__(self):
        if not self.table or any(len(row) != 2 for row in self.table):
            raise SpecsimError(f"batch table: expected (batch, gamma) rows, got {self.table!r}")
        for b, g in self.table:
            _check_gamma(b, "batch", lo=1, hi=MAX_BATCH)
            _check_gamma(g, "gamma", lo=0)
        if [b for b, _ in self.table] != sorted({b for b, _ in self.table}) or self.table[0][0] != 1:
            raise SpecsimError(
                f"batch table: expected increasing batch sizes starting at 1, got {self.table!r}"
            )
        _check_gamma(self.batch_size, "batch size", lo=1, hi=MAX_BATCH)

    @property
    def gamma(self) -> int:
        return [g for b, g in self.table if b <= self.batch_size][-1]

    def update(self, state: int, proposed: int, accepted: int) -> int:
        return state

    def __str__(self) -> str:
        return "batch:" + ",".join(f"{b}={g}" for b, g in self.table) + f"@{self.batch_size}"

    def to_json(self) -> dict:
        return {"policy": str(self), "table": [list(r) for r in self.table], "batch_size": self.batch_size}


def _check_gamma(value, name: str, *, lo: int, hi: int = MAX_GAMMA) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise SpecsimError(f"{name}: expected an integer in {lo}..{hi}, got {show(value)}")


def as_policy(gamma) -> GammaPolicy | BatchTable:
    """A policy from an int (fixed γ ≥ 1) or a policy object; SpecsimError naming gamma otherwise."""
    if isinstance(gamma, (GammaPolicy, BatchTable)):
        return gamma
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise SpecsimError(f"gamma: expected an integer >= 1 or a draft-length policy, got {gamma!r}")
    return GammaPolicy("fixed", int(gamma))


def parse_policy(text: str) -> GammaPolicy | BatchTable:
    """A policy from its string form (see the module docstring). A colon or ``@`` with nothing after it,
    ``fixed`` without its γ and an option given twice are refused, not read as a default or the last."""
    raw = str(text).strip()
    expected = (
        "expected a policy like fixed:5, heuristic:20, heuristic:5,max=16, confidence:0.4,gamma=8 "
        "or batch:1=5,8=3,32=0@8"
    )
    kind, colon, body = raw.partition(":")
    try:
        if raw.isdigit():
            return GammaPolicy("fixed", int(raw))
        if colon and not body.strip():
            raise ValueError  # 'fixed:': the value after the colon is missing
        if kind == "batch":
            rows, at, batch = body.partition("@")
            if at and not batch.strip():
                raise ValueError  # 'batch:1=5@': the batch size after @ is missing
            table = tuple(tuple(int(x) for x in row.split("=")) for row in rows.split(","))
            return BatchTable(table, int(batch) if at else 1)
        parts = [p.strip() for p in body.split(",")] if body else []
        names = [p.split("=", 1)[0] + ("=" if "=" in p else "") for p in parts[1:]]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise SpecsimError(f"option {twice} given twice; expected each option at most once")
        opts = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        flags = {p for p in parts[1:] if "=" not in p}
        if set(opts) - {"max", "gamma"} or flags - {"heuristic"}:
            raise ValueError
        cap = int(opts["max"]) if "max" in opts else None
        if kind == "fixed" and not parts:
            raise ValueError  # 'fixed' needs its gamma; only heuristic has HF's default start
        if kind in ("fixed", "heuristic") and "gamma" not in opts and not flags:
            return GammaPolicy(kind, int(parts[0]) if parts else HF_NUM_ASSISTANT_TOKENS, gamma_max=cap)
        if kind == "confidence" and parts:
            return GammaPolicy(
                "heuristic" if flags else "fixed",
                int(opts.get("gamma", HF_NUM_ASSISTANT_TOKENS)),
                stop_below=float(parts[0]),
                gamma_max=cap,
            )
    except SpecsimError as err:  # a well-formed policy with a bad value: say which
        raise SpecsimError(f"--policy {show(raw)}: {err}") from None
    except (ValueError, TypeError):
        pass
    raise SpecsimError(f"--policy: {expected}, got {show(raw)}")


# --------------------------------------------------------------------------- replay


def replay_policy_blocks(trace, policy, max_new_tokens: int | None = None) -> list[ReplayBlock]:
    """The blocks greedy SD under ``policy`` spends on one prompt's trace (``match``; confidence
    policies also need ``draft_top_probs``); γ is capped at ``max_new_tokens`` − 1 − t as the engine caps
    it (default: the trace's length; a request that stopped at EOS ran with a larger budget)."""
    policy = as_policy(policy)
    match = np.asarray(getattr(trace, "match", trace))
    if match.ndim != 1:  # also a Trace whose match is None (beta only)
        raise SpecsimError("policy replay: expected a greedy trace with 'match' (0/1 per position)")
    top1 = None
    if policy.stop_below > 0:
        top = getattr(trace, "draft_top_probs", None)
        if top is None:
            raise SpecsimError(
                f"policy {policy}: needs the draft's top-1 probability per position "
                "(run 'specsim calibrate acceptance --top-k K')"
            )
        top1 = np.array([row[0] for row in top], dtype=float)
    run = match_runs(match)
    blocks, t, state, n_pos = [], 0, policy.initial_state(), match.size
    budget = token_budget(n_pos, max_new_tokens)
    while t < n_pos:
        g = min(policy.next_gamma(state), budget - 1 - t)
        if top1 is not None and g > 0:
            low = np.flatnonzero(top1[t : t + g] < policy.stop_below)
            g = int(low[0]) + 1 if low.size else g
        a = min(int(run[t]), g)
        blocks.append(ReplayBlock(start=t, proposed=g, accepted=a))
        state = policy.update(state, g, a)
        t += a + 1
    return blocks


def replay_policy_blocks_per_prompt(traces, policy) -> np.ndarray:
    """Blocks greedy SD under ``policy`` spends on each prompt."""
    return np.array([len(replay_policy_blocks(t, policy)) for t in traces], dtype=np.int64)


def replay_policy_tau(traces, policy) -> float:
    """τ under ``policy`` over all prompts = tokens / blocks."""
    tokens = sum(len(getattr(t, "match", t)) for t in traces)
    if tokens == 0:
        raise SpecsimError("traces: expected at least one position, got none")
    return tokens / float(replay_policy_blocks_per_prompt(traces, policy).sum())
