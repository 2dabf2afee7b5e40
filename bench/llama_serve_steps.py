"""llama-server's steps under load, measured against the profile's prices: which term a serving check misses.

Reads the raw runs a finished ``specsim check --serve-rates … --runtime llama.cpp`` keeps beside its profile
(``P.llama-serve.runs.json``) and prints, per rate and side:
- the median gap between a request's successive token events, by how many requests were decoding, next to
  the step :class:`specsim.serve.llama_step_cost.LlamaServerStepCost` prices at that batch (a target-only
  step; with a draft at γ, a block: γ draft steps, the catch-up, the verification and the work outside);
- the first token of requests that found no other request decoding: measured TTFT against the priced
  prompt pass (the target's, and the draft's with SD).

    python bench/llama_serve_steps.py --runs P.llama-serve.runs.json --profile P
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from calibrate.llama_cpp.check_runs import label_gamma  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402
from specsim.jsonio import parse_json, read_text  # noqa: E402
from specsim.profiles import load_profile  # noqa: E402
from specsim.serve.llama_step_cost import LlamaServerStepCost  # noqa: E402
from specsim.serve.step_cost import step_ms  # noqa: E402

MIN_GAPS = 5  # a batch with fewer gaps is not shown (a lone gap says nothing of a step)
BURST_S = 0.005  # token events closer than this are one step (a block streams its tokens an event each)


def gaps_by_batch(run: dict) -> dict[int, list[float]]:
    """Gaps (ms) between a request's successive token events that hold no other request's first token,
    by the number of requests decoding when the gap began."""
    first, finish = np.asarray(run["first_token_s"]), np.asarray(run["finish_s"])
    out = defaultdict(list)
    for stamps in run["token_times_s"]:
        t = np.sort(np.asarray(stamps, dtype=float))
        events = t[np.r_[True, np.diff(t) > BURST_S]]  # a block's tokens stream within a burst
        for a, b in zip(events[:-1], events[1:]):
            if np.any((first > a) & (first <= b)):
                continue  # another request's prompt pass ran in this gap
            out[int(np.sum((first <= a) & (finish > a)))].append(1e3 * (b - a))
    return out


def alone_ttft_ms(run: dict) -> list[tuple[int, float]]:
    """(prompt tokens, TTFT ms) of the requests that arrived with no other request in the server."""
    arrival, first = np.asarray(run["arrival_s"]), np.asarray(run["first_token_s"])
    finish = np.asarray(run["finish_s"])
    out = []
    for i, a in enumerate(arrival):
        others = np.delete(np.arange(len(arrival)), i)
        busy = (arrival[others] <= first[i]) & (finish[others] > a)
        if not busy.any():
            out.append((int(run["prompt_tokens"][i]), 1e3 * (first[i] - a)))
    return out


def priced_step_ms(cost: LlamaServerStepCost, batch: int, gamma: int, width: float) -> float:
    """A target-only step (γ = 0) or an SD block of ``batch`` slots at cache width ``width``."""
    widths = np.full(batch, width)
    return step_ms(
        cost, batch=batch, gamma=gamma, context_tokens=widths, prefill_chunks=(), images=0,
        draft_prefill=False,
    )  # fmt: skip


def priced_prompt_ms(cost: LlamaServerStepCost, tokens: int, gamma: int) -> float:
    """The prompt pass of one request: the target's, and with SD the draft's."""
    chunks = [(tokens, 0)]
    return step_ms(
        cost, batch=0, gamma=gamma, context_tokens=np.zeros(0), prefill_chunks=chunks, images=0,
        draft_prefill=gamma > 0,
    )  # fmt: skip


def _priced(cost: LlamaServerStepCost, batch: int) -> bool:
    try:
        cost.passes.check_batch(batch)
    except SpecsimError:
        return False
    return True


def report(runs_by_key: dict, profile, new_tokens: int) -> list[str]:
    """The module docstring's two tables, one block per rate and side."""
    lines = []
    cost = LlamaServerStepCost.from_profile(profile)
    for key, runs in runs_by_key.items():
        rate, label = key.split("@")
        gamma = label_gamma(label)
        prompt = float(np.mean([t for r in runs for t in r["prompt_tokens"]]))
        width = prompt + new_tokens / 2
        gaps = defaultdict(list)
        alone = []
        for r in runs:
            for b, g in gaps_by_batch(r).items():
                gaps[b] += g
            alone += alone_ttft_ms(r)
        cells = []
        for b in sorted(k for k in gaps if k > 0 and len(gaps[k]) >= MIN_GAPS and _priced(cost, k)):
            meas, pred = float(np.median(gaps[b])), priced_step_ms(cost, b, gamma, width)
            cells.append(f"B{b} {meas:.0f}/{pred:.0f} ({pred / meas - 1:+.0%}, n {len(gaps[b])})")
        lines.append(f"{rate} req/s {label}: step ms measured/priced: " + ", ".join(cells))
        if alone:
            meas = float(np.median([t for _, t in alone]))
            pred = float(np.median([priced_prompt_ms(cost, n, gamma) for n, _ in alone]))
            lines.append(
                f"  TTFT alone (n {len(alone)}): {meas:.0f} ms measured, prompt pass priced {pred:.0f} ms "
                f"({pred / meas - 1:+.0%})"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="the serving check's raw runs (P.llama-serve.runs.json)")
    p.add_argument("--profile", required=True, help="the llama.cpp profile the check predicted from")
    args = p.parse_args(argv)
    data = parse_json(read_text(Path(args.runs), "--runs"), args.runs)
    if "key" not in data or "runs" not in data:
        raise SpecsimError(f"--runs {args.runs}: expected a serving check's raw runs (key and runs)")
    profile = load_profile(args.profile)
    print("\n".join(report(data["runs"], profile, int(data["key"]["new_tokens"]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
