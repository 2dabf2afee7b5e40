"""Benchmark: simulate 100 000 requests of 256 output tokens near saturation (``specsim serve``'s event loop).

LLaVA-1.5-7B / 68m on an H100 (vLLM runtime, roofline step costs), 512 text tokens + 1 image per prompt, SD
γ = 3 at i.i.d. α = 0.7, vLLM's default scheduler, KV cache from the device's memory. The rate defaults to
90 % of a capacity estimate: each request's prefill as a pass of its own, then its decode steps at the
largest batch the KV cache holds (a lower bound: a real step merges prefill chunks into the decode pass).
Prints the wall time of the simulation alone (the goal: ≤ 10 s on one core).

Run: python bench/serve_speed.py [--requests 100000] [--rate R] [--target-only]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import time  # noqa: E402

import numpy as np  # noqa: E402

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.acceptance.theory import tau_iid  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402
from specsim.draft_shapes.policies import GammaPolicy
from specsim.hardware.device import load_device  # noqa: E402
from specsim.hardware.plan_inputs import resolve_models  # noqa: E402
from specsim.hardware.runtime import load_runtime  # noqa: E402
from specsim.serve.arrivals import poisson_arrivals, uniform_requests  # noqa: E402
from specsim.serve.metrics import summarize  # noqa: E402
from specsim.serve.roofline_cost import RooflineStepCost  # noqa: E402
from specsim.serve.scheduler import SchedulerConfig  # noqa: E402
from specsim.serve.simulator import simulate  # noqa: E402
from specsim.serve.speculation import IidAcceptance  # noqa: E402

PROMPT, IMAGES, OUTPUT, GAMMA, ALPHA = 512, 1, 256, 3, 0.7


def capacity_per_s(cost: RooflineStepCost, scheduler: SchedulerConfig, gamma: int) -> float:
    """Requests/s = 1 / (prefill + decode time per request): prefill alone, decode steps at a full batch
    shared by the batch, OUTPUT / τ steps."""
    prompt = PROMPT + IMAGES * cost.image_tokens_per_image
    batch = min(scheduler.max_num_seqs, scheduler.kv_cache_tokens // (prompt + OUTPUT + gamma))
    ctx = np.full(batch, prompt + OUTPUT / 2)
    step = cost.target_step_ms(batch, gamma + 1, ctx) + cost.draft_ms(batch, gamma, ctx)
    step += cost.overhead_ms(batch, gamma)
    prefill = cost.target_step_ms(0, 1, ctx[:0], [(prompt, 0)]) + cost.encoder_ms(IMAGES)
    prefill += cost.draft_ms(0, gamma, ctx[:0], [(prompt, 0)]) if gamma else 0.0
    tau = float(tau_iid(ALPHA, gamma)) if gamma else 1.0
    return 1e3 / (prefill + OUTPUT / tau * step / batch)


def main() -> None:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=number_arg("size", integer=True), default=100_000)
    ap.add_argument(
        "--rate", type=number_arg("rate_per_s"), default=None, help="requests/s (default: 90%% of capacity)"
    )
    ap.add_argument("--target-only", action="store_true", help="gamma = 0 instead of 3")
    args = ap.parse_args()
    _, target, draft = resolve_models(pair="llava-1.5-7b-68m", target=None, draft=None)
    cost = RooflineStepCost(target, draft, load_device("h100-sxm"), load_runtime("vllm"))
    scheduler = SchedulerConfig(kv_cache_tokens=cost.kv_cache_tokens())
    gamma = 0 if args.target_only else GAMMA
    rate = args.rate or 0.9 * capacity_per_s(cost, scheduler, gamma)
    times = poisson_arrivals(args.requests, rate, np.random.default_rng(0))
    requests = uniform_requests(times, PROMPT, IMAGES, OUTPUT)
    t0 = time.perf_counter()
    run = simulate(
        requests,
        cost=cost,
        policy=GammaPolicy(gamma),
        acceptance=IidAcceptance(ALPHA),
        rng=np.random.default_rng(1),
        scheduler=scheduler,
    )
    wall = time.perf_counter() - t0
    m = summarize(run)
    print(
        f"{args.requests} requests x {OUTPUT} output tokens at {rate:.2f} req/s (gamma {gamma}): "
        f"{wall:.2f} s wall, {run.steps} steps ({wall / run.steps * 1e6:.0f} us/step)"
    )
    print(
        f"  simulated {m.duration_s:.0f} s: {m.output_tokens_per_s:.0f} output tok/s, "
        f"busy {m.busy_fraction:.2f}, TPOT p50 {m.tpot_ms.p50:.2f} ms, TTFT p90 {m.ttft_ms.p90:.1f} ms"
    )


if __name__ == "__main__":
    sys.exit(run_main(main))
