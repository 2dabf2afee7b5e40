"""Benchmark: evaluations per second of the vectorised analytic core (goal >= 1e7/s), and trace replay's
positions per second (goal >= 1e7/s).

Run: python bench/bench_analytic.py [--points 1000000] [--repeats 5]
Prints the median over repeats; no assertion (timings belong here, not in tests).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.acceptance.replay import replay_traces_tau  # noqa: E402
from specsim.acceptance.theory import optimal_gamma, speedup, tau_iid  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = ScriptParser(description=__doc__)
    ap.add_argument("--points", type=number_arg("size", integer=True), default=1_000_000)
    ap.add_argument("--repeats", type=number_arg("repeats", integer=True), default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.points
    gamma = rng.integers(1, 17, n)
    alpha = rng.random(n)
    c = rng.uniform(0.005, 0.5, n)
    v = 1.0 + 0.05 * gamma

    def full():
        return speedup(tau_iid(alpha, gamma), gamma, c, v)

    s = _median_s(full, args.repeats)
    print(
        f"speedup(tau_iid(alpha, gamma), gamma, c, v) over {n:,} (gamma, alpha, c) points: "
        f"{s * 1e3:.1f} ms -> {n / s:,.0f} evaluations/s"
    )

    side = int(np.sqrt(n / 16))
    a_grid = np.linspace(0.01, 0.99, side)[None, :]
    c_grid = np.geomspace(0.005, 0.5, side)[:, None]
    s_opt = _median_s(lambda: optimal_gamma(a_grid, c_grid, gamma_max=16), args.repeats)
    evals = side * side * 16
    print(
        f"optimal_gamma over a {side}x{side} (alpha, c) grid, gamma 1..16: {s_opt * 1e3:.1f} ms -> "
        f"{evals / s_opt:,.0f} speedup evaluations/s, {side * side / s_opt:,.0f} grid points/s"
    )

    traces = [rng.random(1000) < 0.8 for _ in range(5000)]  # 5e6 positions
    s_replay = _median_s(lambda: replay_traces_tau(traces, 4), args.repeats)
    rate = 5e6 / s_replay
    print(f"replay_traces_tau over 5,000 traces x 1,000 positions at gamma 4: {rate:,.0f} positions/s")


if __name__ == "__main__":
    sys.exit(run_main(main))
