"""Benchmark: roofline evaluations per second (vectorised) and a full catalog plan; prints figures.

Run: python bench/bench_roofline.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.hardware import Efficiency, decode_ms, load_devices, plan_hardware, spec_from_config  # noqa: E402
from specsim.predict.acceptance_source import MethodTau  # noqa: E402
from specsim.profile_format import MethodAcceptance  # noqa: E402

LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32000,
}
DRAFT_68M = {
    "model_type": "llama",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 2,
    "num_attention_heads": 12,
    "vocab_size": 32000,
}


def main() -> None:
    ScriptParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help, or an error
    target, draft = spec_from_config(LLAMA2_7B, "7b"), spec_from_config(DRAFT_68M, "68m")
    devices = load_devices(include_cpu=False)
    batch = np.arange(1, 1025)[:, None]
    context = np.linspace(0, 8192, 1024)[None, :]
    t0 = time.perf_counter()
    for dev in devices:
        decode_ms(target, dev, Efficiency(), context, batch)
    dt = time.perf_counter() - t0
    n = batch.size * context.size * len(devices)
    print(f"roofline decode_ms: {n / dt:,.0f} evaluations/s ({n:,} points in {dt * 1e3:.0f} ms)")
    mt = MethodTau.from_entry(
        MethodAcceptance(method="M", scenario="s", images_per_prompt=1, gamma=5, tau=2.24)
    )
    t0 = time.perf_counter()
    plan = plan_hardware(target, draft, devices, [mt], batches=2 ** np.arange(7), contexts=(1024, 4096, 8192))
    print(
        f"plan_hardware: {len(plan.rows)} rows ({len(devices)} devices x 7 batches x 3 contexts x 8 gammas) "
        f"in {(time.perf_counter() - t0) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    sys.exit(run_main(main))
