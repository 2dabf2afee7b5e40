"""Hold the planner's Tp, Tq, Tv(γ) and speedup against GPU step timings of bench/gpu_step_kernels.py.

For every measured batch B and context C: the planner's per-term prediction (``specsim.hardware``'s
roofline with a runtime: vllm for CUDA-graph steps, hf-eager for HF transformers' forward) against the
measurement, the error per term, and the best-γ speedup both ways with the pair's τ (IbED profile,
method M by default):

    speedup(γ) = τ(γ)·Tp / (γ·Tq + Tv(γ) [+ the runtime's per-block overhead])

The measured speedup is of the kernels alone (a serving engine adds its scheduler, sampler and rejection
sampler per block: the runtime's ``overhead_ms_per_block`` and ``..._per_sequence_per_block``); the
planner's is printed both without that overhead (comparable) and with it (what ``specsim hardware``
prints). The batch where the speedup falls below 1 is printed for each.

    python bench/gpu_step_compare.py specsim/profiles/measured/gpu/h200-llava-1.5-7b-68m-steps.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsim.acceptance.theory import block_speedup, sd_block_ms  # noqa: E402
from specsim.cli.hardware_inputs import device_runtimes, resolve_models, tau_methods  # noqa: E402
from specsim.hardware.device import load_devices  # noqa: E402
from specsim.hardware.roofline import decode_ms, verify_ms  # noqa: E402
from specsim.hardware.runtime import block_overhead_ms  # noqa: E402

RUNTIME_OF_MODE = {"graph": "vllm", "eager": "gpt-fast", "hf-eager": "hf-eager"}
DEVICE_OF_GPU = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H100 PCIe": "h100-pcie"}


def measured_table(points: list[dict], mode: str) -> dict:
    """{(model, C, B, rows): median ms} of one mode."""
    return {
        (p["model"], p["context_tokens"], p["batch"], p["rows"]): p["ms_median"]
        for p in points
        if p["mode"] == mode
    }


def compare(
    record: dict, mode: str, method: str, device: str | None, runtime: str | None = None
) -> list[dict]:
    """One row per (C, B) with both models measured: terms and best-γ speedups, measured and predicted."""
    table = measured_table(record["points"], mode)
    gpu = record["provenance"].get("gpu")
    dev_name = device or DEVICE_OF_GPU.get(gpu)
    if dev_name is None:
        raise SystemExit(f"unknown GPU {gpu!r}: pass --device (a specsim hardware catalog name)")
    dev = load_devices([dev_name])[0]
    runtime = runtime or RUNTIME_OF_MODE[mode]
    eff = device_runtimes(runtime, [dev])[dev.name]
    _, target, draft = resolve_models(
        pair="llava-1.5-7b-68m",
        target=None,
        draft=None,
        model_config=None,
        fit_profile=None,
        dtype=None,
        kv_dtype=None,
    )
    _, methods, _ = tau_methods(
        pair="llava-1.5-7b-68m",
        target=target,
        draft=draft,
        profile_name=None,
        methods=[method],
        scenario=None,
        tau=None,
        alpha=None,
        gamma=None,
        gamma_max=8,
    )
    mt = methods[0]
    tau_of = dict(zip(mt.gammas, mt.tau))
    rows_of = defaultdict(set)
    for model, c, b, r in table:
        if model == "target":
            rows_of[(c, b)].add(r)
    out = []
    for (c, b), rows in sorted(rows_of.items()):
        tp_m, tq_m = table.get(("target", c, b, 1)), table.get(("draft", c, b, 1))
        gammas = [r - 1 for r in sorted(rows) if r > 1 and r - 1 in tau_of]
        if tp_m is None or tq_m is None or not gammas:
            continue
        g = np.asarray(gammas, dtype=float)
        tau = np.asarray([tau_of[x] for x in gammas])
        tv_m = np.asarray([table[("target", c, b, x + 1)] for x in gammas])
        tp_p = float(decode_ms(target, dev, eff, c, b))
        tq_p = float(decode_ms(draft, dev, eff, c, b))
        tv_p = np.asarray(verify_ms(target, dev, eff, g, c, b), dtype=float)
        extra = eff.extra_draft_forwards_per_block
        s_m = block_speedup(tau, tp_m, sd_block_ms(g, tq_m, tv_m))
        s_p = block_speedup(tau, tp_p, sd_block_ms(g + extra, tq_p, tv_p))
        s_pf = block_speedup(tau, tp_p, sd_block_ms(g + extra, tq_p, tv_p, block_overhead_ms(eff, b)))
        k_m, k_p, k_pf = int(np.argmax(s_m)), int(np.argmax(s_p)), int(np.argmax(s_pf))
        out.append(
            dict(
                context_tokens=c,
                batch=b,
                tp_ms=tp_m,
                tp_pred_ms=tp_p,
                tq_ms=tq_m,
                tq_pred_ms=tq_p,
                v_at_best=tv_m[k_m] / tp_m,
                v_pred_at_best=tv_p[k_m] / tp_p,
                gamma_best=gammas[k_m],
                tv_err=float(np.median(np.abs(tv_p / tv_m - 1))),
                speedup=float(s_m[k_m]),
                speedup_pred=float(s_p[k_p]),
                gamma_pred=gammas[k_p],
                speedup_pred_full=float(s_pf[k_pf]),
            )
        )
    return out


def stop_paying(rows: list[dict], key: str) -> str:
    """The first measured batch whose ``key`` speedup is below 1, per context."""
    by_c = defaultdict(list)
    for r in rows:
        by_c[r["context_tokens"]].append(r)
    parts = []
    for c, rs in sorted(by_c.items()):
        below = [r["batch"] for r in sorted(rs, key=lambda r: r["batch"]) if r[key] < 1]
        top = max(r["batch"] for r in rs)
        parts.append(f"C={c}: {below[0]}" if below else f"C={c}: never up to B={top}")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="JSON written by bench/gpu_step_kernels.py")
    p.add_argument("--method", default="M", help="drafting method of the pair's profile (default M)")
    p.add_argument("--device", default=None, help="specsim hardware catalog name (default: from the GPU)")
    p.add_argument(
        "--runtime",
        default=None,
        help="planner runtime for every mode (default: vllm for graph steps, hf-eager for HF's)",
    )
    args = p.parse_args(argv)
    points, record = [], None
    for f in args.files:
        record = json.loads(Path(f).read_text())
        points += record["points"]
    record = dict(record, points=points)
    prov = record["provenance"]
    print(
        f"{prov.get('gpu')} (driver {prov.get('driver')}, CUDA {prov.get('cuda')}, "
        f"torch {prov.get('torch')}, {prov.get('dtype')}); method {args.method}"
    )
    for mode in sorted({pt["mode"] for pt in points}):
        rows = compare(record, mode, args.method, args.device, args.runtime)
        if not rows:
            continue
        runtime = args.runtime or RUNTIME_OF_MODE[mode]
        print(f"\n{mode} steps against the planner's runtime {runtime} (err = predicted/measured - 1)")
        print(
            "     C     B   Tp ms  err   Tq ms   err  best γ  v meas  v pred  Tv err  speedup  pred (γ)  "
            "pred+overhead"
        )
        for r in rows:
            print(
                f"{r['context_tokens']:6d} {r['batch']:5d} {r['tp_ms']:7.2f}"
                f" {r['tp_pred_ms'] / r['tp_ms'] - 1:+5.0%}"
                f" {r['tq_ms']:6.3f} {r['tq_pred_ms'] / r['tq_ms'] - 1:+5.0%} {r['gamma_best']:7d}"
                f" {r['v_at_best']:7.2f} {r['v_pred_at_best']:7.2f} {r['tv_err']:6.1%} {r['speedup']:8.2f}"
                f" {r['speedup_pred']:5.2f} ({r['gamma_pred']}) {r['speedup_pred_full']:13.2f}"
            )
        errs = {k: [abs(r[f"{k}_pred_ms"] / r[f"{k}_ms"] - 1) for r in rows] for k in ("tp", "tq")}
        s_err = [abs(r["speedup_pred"] / r["speedup"] - 1) for r in rows]
        print(
            f"median |err|: Tp {np.median(errs['tp']):.1%}, Tq {np.median(errs['tq']):.1%}, "
            f"Tv {np.median([r['tv_err'] for r in rows]):.1%}, speedup {np.median(s_err):.1%} "
            f"(max {max(s_err):.1%})"
        )
        print(f"speedup < 1 from (measured kernels): {stop_paying(rows, 'speedup')}")
        print(f"speedup < 1 from (planner, no per-block overhead): {stop_paying(rows, 'speedup_pred')}")
        full = stop_paying(rows, "speedup_pred_full")
        print(f"speedup < 1 from (planner as `specsim hardware` prints): {full}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
