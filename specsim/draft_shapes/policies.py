"""Dynamic draft length: policies that choose γ block by block, and their exact greedy replay.

A policy is a frozen description plus a pure transition (``initial_state``, ``next_gamma``, ``update``;
``stop_below``), shared by the engine and the replay, so both run the same rule. :func:`parse_policy` reads
``fixed:5``, ``heuristic[:G][,max=M]`` (HF transformers' ``num_assistant_tokens_schedule="heuristic"``),
``confidence:P[,gamma=G][,heuristic]`` (HF's ``assistant_confidence_threshold``) and
``batch:1=5,8=3,32=0[@B]`` or ``1-7:5,8-31:3,32-1024:0`` (vLLM's ``num_speculative_tokens_per_batch_size``).
The replay is exact whenever the traces' top-1 probabilities are. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.bounds import MAX_GAMMA, RANGES
from specsim.draft_shapes.block_plans import match_runs, token_budget
from specsim.draft_shapes.tree_replay import ReplayBlock
from specsim.errors import SpecsimError
from specsim.jsonio import show

HF_NUM_ASSISTANT_TOKENS = 20  # transformers GenerationConfig default for assisted generation
MAX_BATCH = int(RANGES["batch"][1])


@dataclass(frozen=True)
class GammaPolicy:
    """γ per block: ``gamma`` (the heuristic schedule's start; the serving ``num_speculative_tokens``),
    ``by_batch`` ranges (lo, hi, γ) and 0 from ``off_from_batch`` keyed on the batch (a replay runs at
    ``batch_size``); ``schedule`` "fixed" or "heuristic" (HF's, capped at ``gamma_max``); drafting stops
    early below draft probability ``stop_below``."""

    gamma: int = 5
    by_batch: tuple[tuple[int, int, int], ...] = ()
    off_from_batch: int | None = None
    schedule: str = "fixed"
    stop_below: float = 0.0
    gamma_max: int | None = None
    batch_size: int = 1

    def __post_init__(self):
        if self.schedule not in ("fixed", "heuristic"):
            raise SpecsimError(f"policy schedule: expected 'fixed' or 'heuristic', got {self.schedule!r}")
        _check_gamma(self.gamma, "gamma", lo=0 if self.schedule == "fixed" else 1)
        if self.gamma_max is not None:
            _check_gamma(self.gamma_max, "max", lo=self.gamma)
        if not 0.0 <= float(self.stop_below) < 1.0:
            raise SpecsimError(f"confidence: expected a probability in [0, 1), got {self.stop_below!r}")
        for lo, hi, g in self.by_batch:
            if not (1 <= lo <= hi <= MAX_BATCH and 0 <= g <= MAX_GAMMA):
                raise SpecsimError(
                    f"gamma by batch: expected lo-hi:gamma with 1 <= lo <= hi <= {MAX_BATCH} and 0 <= gamma "
                    f"<= {MAX_GAMMA}, got {lo}-{hi}:{g}"
                )
        spans = sorted((lo, hi) for lo, hi, _ in self.by_batch)
        for (lo1, hi1), (lo2, _) in zip(spans, spans[1:]):
            if lo2 <= hi1:
                raise SpecsimError(f"gamma by batch: ranges {lo1}-{hi1} and {lo2}-... overlap")
        if self.off_from_batch is not None and self.off_from_batch < 1:
            raise SpecsimError(f"SD off from batch: expected a batch size >= 1, got {self.off_from_batch!r}")
        _check_gamma(self.batch_size, "batch size", lo=1, hi=MAX_BATCH)

    @property
    def keyed_on_batch(self) -> bool:
        return bool(self.by_batch) or self.off_from_batch is not None

    def gamma_at(self, batch: int) -> int:
        """Drafts per request in a block (a serving step) whose batch is ``batch``."""
        if self.off_from_batch is not None and batch >= self.off_from_batch:
            return 0
        for lo, hi, g in self.by_batch:
            if lo <= batch <= hi:
                return g
        return self.gamma

    def falls_back(self, max_batch: int) -> bool:
        """Whether some batch in 1..``max_batch`` takes the fixed ``gamma`` (in no range, SD not off)."""
        spans = [(lo, hi) for lo, hi, _ in self.by_batch]
        off = self.off_from_batch or max_batch + 1
        return any(not any(lo <= b <= hi for lo, hi in spans) for b in range(1, min(off, max_batch + 1)))

    @property
    def max_gamma(self) -> int:
        """The largest γ any block can use (0: SD never runs, the draft is never loaded)."""
        return max([self.gamma, *(g for _, _, g in self.by_batch), self.gamma_max or 0])

    def initial_state(self) -> int:
        """The γ of a request's first block (its state: the γ of the next block)."""
        return self.gamma_at(self.batch_size)

    def next_gamma(self, state: int) -> int:
        return state

    def update(self, state: int, proposed: int, accepted: int) -> int:
        """HF's rule: +2 when every proposed draft was accepted, else −1 (floor 1)."""
        if self.schedule == "fixed":
            return state
        state = state + 2 if accepted == proposed else max(1, state - 1)
        return state if self.gamma_max is None else min(state, self.gamma_max)

    def table(self) -> tuple[tuple[int, int], ...]:
        """γ by batch as (from batch, γ) rows where it changes, from batch 1."""
        rows: list[tuple[int, int]] = []
        marks = sorted({1, *(lo for lo, _, _ in self.by_batch), *(hi + 1 for _, hi, _ in self.by_batch)})
        marks += [] if self.off_from_batch is None else [self.off_from_batch]
        for b in sorted(m for m in set(marks) if m <= MAX_BATCH):
            if not rows or rows[-1][1] != self.gamma_at(b):
                rows.append((b, self.gamma_at(b)))
        return tuple(rows)

    def __str__(self) -> str:
        if self.keyed_on_batch:
            return "batch:" + ",".join(f"{b}={g}" for b, g in self.table()) + f"@{self.batch_size}"
        if self.stop_below > 0:
            text = f"confidence:{self.stop_below:g},gamma={self.gamma}"
            text += ",heuristic" if self.schedule == "heuristic" else ""
        else:
            text = f"{self.schedule}:{self.gamma}"
        return text + (f",max={self.gamma_max}" if self.gamma_max is not None else "")

    def describe(self, max_batch: int | None = None) -> str:
        """The serving settings in words: γ, its ranges by batch, where SD turns off (the fixed γ left out
        where the ranges cover every batch up to ``max_batch``: no step takes it)."""
        shown = max_batch is None or not self.by_batch or self.falls_back(max_batch)
        parts = [f"gamma={self.gamma}"] if shown else []
        if self.by_batch:
            parts.append("by batch " + ",".join(f"{lo}-{hi}:{g}" for lo, hi, g in self.by_batch))
        if self.off_from_batch is not None:
            parts.append(f"off from batch {self.off_from_batch}")
        return ", ".join(parts)

    def to_json(self) -> dict:
        if self.keyed_on_batch:
            rows = [list(r) for r in self.table()]
            return {"policy": str(self), "table": rows, "batch_size": self.batch_size}
        return {
            "policy": str(self),
            "schedule": self.schedule,
            "gamma": self.gamma,
            "stop_below": self.stop_below,
            "gamma_max": self.gamma_max,
        }


def table_policy(table, batch_size: int = 1) -> GammaPolicy:
    """A policy from (batch, γ) rows: the row of the largest batch ≤ B; rows start at batch 1."""
    if not table or any(len(row) != 2 for row in table):
        raise SpecsimError(f"batch table: expected (batch, gamma) rows, got {table!r}")
    for b, g in table:
        _check_gamma(b, "batch", lo=1, hi=MAX_BATCH)
        _check_gamma(g, "gamma", lo=0)
    starts = [b for b, _ in table]
    if starts != sorted(set(starts)) or starts[0] != 1:
        raise SpecsimError(f"batch table: expected increasing batch sizes starting at 1, got {table!r}")
    ends = [b - 1 for b in starts[1:]] + [MAX_BATCH]
    ranges = tuple((b, hi, g) for (b, g), hi in zip(table, ends))
    return GammaPolicy(ranges[-1][2], ranges, batch_size=batch_size)


def parse_batch_ranges(text: str, where: str = "--gamma-by-batch") -> tuple[tuple[int, int, int], ...]:
    """The ranges spelling: '1-8:5,9-32:3,33-256:0' -> ((1, 8, 5), (9, 32, 3), (33, 256, 0)); 'B:γ' is the
    range B-B (``specsim serve --gamma-by-batch``; vLLM's ``num_speculative_tokens_per_batch_size``); the
    table spelling 'batch:1=5,9=3' gives its ranges too."""
    usage = f"{where}: expected ranges like 1-8:5,9-32:3 (batch lo-hi:gamma), got {text!r}"
    if str(text).strip().startswith("batch:"):
        policy = parse_policy(text)
        if policy.batch_size != 1:
            raise SpecsimError(f"{where}: each step's batch picks the row, expected no @B, got {text!r}")
        return policy.by_batch
    out = []
    for part in str(text).split(","):
        span, sep, g = part.strip().partition(":")
        lo, dash, hi = span.partition("-")
        try:
            triple = (int(lo), int(hi) if dash else int(lo), int(g))
        except ValueError:
            raise SpecsimError(usage) from None
        if not sep:
            raise SpecsimError(usage)
        out.append(triple)
    try:
        GammaPolicy(0, tuple(out))
    except SpecsimError as err:
        raise SpecsimError(f"{where}: {err} (in {text!r})") from None
    return tuple(out)


def _check_gamma(value, name: str, *, lo: int, hi: int = MAX_GAMMA) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise SpecsimError(f"{name}: expected an integer in {lo}..{hi}, got {show(value)}")


def as_policy(gamma) -> GammaPolicy:
    """A policy from an int (fixed γ ≥ 1) or a policy object; SpecsimError naming gamma otherwise."""
    if isinstance(gamma, GammaPolicy):
        return gamma
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise SpecsimError(f"gamma: expected an integer >= 1 or a draft-length policy, got {gamma!r}")
    return GammaPolicy(int(gamma))


def parse_policy(text: str) -> GammaPolicy:
    """A policy from its string form (see the module docstring; the ranges spelling of
    :func:`parse_batch_ranges` too). A colon or ``@`` with nothing after it, ``fixed`` without its γ and
    an option given twice are refused, not read as a default or the last."""
    raw = str(text).strip()
    expected = (
        "expected a policy like fixed:5, heuristic:20, heuristic:5,max=16, confidence:0.4,gamma=8 "
        "or batch:1=5,8=3,32=0@8"
    )
    kind, colon, body = raw.partition(":")
    try:
        if raw.isdigit():
            return GammaPolicy(_at_least_one(int(raw)))
        if kind[:1].isdigit():  # the ranges spelling, '1-8:5,9-32:3'
            return GammaPolicy(0, parse_batch_ranges(raw, "--policy"))
        if colon and not body.strip():
            raise ValueError  # 'fixed:': the value after the colon is missing
        if kind == "batch":
            rows, at, batch = body.partition("@")
            if at and not batch.strip():
                raise ValueError  # 'batch:1=5@': the batch size after @ is missing
            table = tuple(tuple(int(x) for x in row.split("=")) for row in rows.split(","))
            return table_policy(table, int(batch) if at else 1)
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
            g = int(parts[0]) if parts else HF_NUM_ASSISTANT_TOKENS
            return GammaPolicy(_at_least_one(g), schedule=kind, gamma_max=cap)
        if kind == "confidence" and parts:
            return GammaPolicy(
                _at_least_one(int(opts.get("gamma", HF_NUM_ASSISTANT_TOKENS))),
                schedule="heuristic" if flags else "fixed",
                stop_below=float(parts[0]),
                gamma_max=cap,
            )
    except SpecsimError as err:  # a well-formed policy with a bad value: say which
        raise SpecsimError(f"--policy {show(raw)}: {err}") from None
    except (ValueError, TypeError):
        pass
    raise SpecsimError(f"--policy: {expected}, got {show(raw)}")


def _at_least_one(gamma: int) -> int:
    """A per-block schedule drafts at least one token (γ = 0 is a serving setting, by batch)."""
    _check_gamma(gamma, "gamma", lo=1)
    return gamma


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
