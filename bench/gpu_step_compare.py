"""Print the planner's Tp, Tq, Tv(γ) and best-γ speedup against GPU step timings of bench/gpu_step_kernels.py.

For every measured batch B and context C, per GPU (the comparison itself is
:mod:`specsim.validation.gpu_steps`): the planner's per-term prediction (roofline + runtime: vllm for
CUDA-graph steps, hf-eager for HF transformers' forward, fitted on these steps and so priced per GPU by its
fit on the other GPU's: :mod:`specsim.validation.step_fit`) against the measurement, the error per term, and
the best-γ speedup both ways with IbED's τ (method M, ChartQA). The measured speedup is of the kernels alone;
the planner's is printed without the runtime's per-block overhead (comparable) and with it (what ``specsim
hardware`` prints). The batch where each falls below 1 closes every table.

    python bench/gpu_step_compare.py                                     # every shipped file
    python bench/gpu_step_compare.py specsim/data/gpu_steps/h100-llava-1.5-7b-68m-graph.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.hardware.device import load_device  # noqa: E402
from specsim.validation.gpu_steps import RUNTIME_OF_MODE, compare_steps, crossover_text, load_records  # noqa: E402
from specsim.validation.step_fit import STEP_FIT, held_out_points  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="JSON of bench/gpu_step_kernels.py (default: the shipped ones)")
    p.add_argument("--device", default=None, help="specsim hardware catalog name (default: from the GPU)")
    p.add_argument("--runtime", default=None, help="planner runtime for every mode (default: per mode)")
    args = p.parse_args(argv)
    if missing := [f for f in args.files if not Path(f).is_file()]:
        p.error(f"no such file: {', '.join(missing)}")
    if args.device:
        load_device(args.device)  # an unknown name is refused before any table is printed
    records = load_records(args.files or None)
    for prov in {r["provenance"]["gpu"]: r["provenance"] for r in records}.values():
        print(
            f"{prov['gpu']}: driver {prov.get('driver')}, CUDA {prov.get('cuda')}, torch {prov['torch']}, "
            f"{prov['dtype']}"
        )
    for mode in sorted({pt["mode"] for r in records for pt in r["points"]}):
        runtime = args.runtime or RUNTIME_OF_MODE[mode]
        held_out = not (args.runtime or args.device) and STEP_FIT.get(runtime, ("",))[0] == mode
        if held_out:
            rows = held_out_points(records, runtime)
        else:
            rows = compare_steps(records, mode, runtime, args.device)
        if not rows:
            continue
        how = ", each GPU priced by its fit on the other GPU's steps" if held_out else ""
        print(f"\n{mode} steps against the planner's runtime {runtime}{how} (err = predicted/measured - 1)")
        print(
            "gpu                       C     B   Tp ms  err   Tq ms   err  best γ  v meas  v pred  Tv err  "
            "speedup  pred (γ)  pred+overhead"
        )
        for r in rows:
            print(
                f"{r.gpu[:22]:22s} {r.context_tokens:6d} {r.batch:5d} {r.tp_ms:7.2f}"
                f" {r.tp_pred_ms / r.tp_ms - 1:+5.0%} {r.tq_ms:6.3f} {r.tq_pred_ms / r.tq_ms - 1:+5.0%}"
                f" {r.gamma_best:7d} {r.v_at_best:7.2f} {r.v_pred_at_best:7.2f} {r.tv_err:6.1%}"
                f" {r.speedup:8.2f} {r.speedup_pred:5.2f} ({r.gamma_pred}) {r.speedup_pred_full:13.2f}"
            )
        for gpu in sorted({r.gpu for r in rows}):
            g = [r for r in rows if r.gpu == gpu]
            med = {
                k: np.median([abs(getattr(r, f"{k}_pred_ms") / getattr(r, f"{k}_ms") - 1) for r in g])
                for k in ("tp", "tq")
            }
            s_err = [abs(r.error) for r in g]
            print(
                f"{gpu}: median |err| Tp {med['tp']:.1%}, Tq {med['tq']:.1%}, "
                f"Tv {np.median([r.tv_err for r in g]):.1%}, speedup {np.median(s_err):.1%} "
                f"(max {max(s_err):.1%})"
            )
        print(f"speedup < 1 from (measured kernels): {crossover_text(rows, 'speedup')}")
        print(f"speedup < 1 from (planner, no per-block overhead): {crossover_text(rows, 'speedup_pred')}")
        full = crossover_text(rows, "speedup_pred_full")
        print(f"speedup < 1 from (planner as `specsim hardware` prints): {full}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
