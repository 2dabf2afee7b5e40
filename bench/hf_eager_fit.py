"""Fit the hf-eager runtime to our GPU HF steps, leave one GPU out, and print the error per term.

The HF steps of ``specsim/data/gpu_steps`` (HF transformers' forward with its DynamicCache on an H100 and an
H200, ``bench/gpu_step_kernels.py --modes hf``) fit the runtime's host time (per forward, per layer, per
mask), its device time beyond the roofline (per layer, the cache concatenation) and, with the host and device
overlapped (max) or not (sum), are scored per GPU with the fit on the other GPU
(:mod:`specsim.validation.step_fit`). Per term (Tp, Tq, Tv, the host overhead: steps whose cache holds at most
4096 positions, flat in batch and context) and for the best-γ speedup: median and max |error|, before (a
runtime file, ``--before``) and after; the speedup also without the B x C whose verify step was measured
faster than the decode step it extends (v < 1: the host's other work slowed that Tp). ``--write`` stores the
fit on every GPU in the runtime file.

    git show ca8f3fc:specsim/hardware/runtimes/hf-eager.json > /tmp/hf-eager-before.json
    python bench/hf_eager_fit.py --before /tmp/hf-eager-before.json
    python bench/hf_eager_fit.py --write     # refit on both GPUs into specsim/hardware/runtimes/hf-eager.json
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import name_arg  # noqa: E402
from specsim.hardware.runtime import RUNTIMES_DIR, load_runtime  # noqa: E402
from specsim.jsonio import write_json_atomic  # noqa: E402
from specsim.validation.gpu_steps import compare_steps, load_records, step_cost  # noqa: E402
from specsim.validation.step_fit import (  # noqa: E402
    FIT_COMMAND,
    STEP_FIT,
    fit_steps,
    leave_one_gpu_out,
    step_set,
)

HOST_BOUND_POSITIONS = 4096  # batch × context at most this: a step's time is flat in both (host-bound)
MODE, STARTS = STEP_FIT["hf-eager"]


def _err(pred, meas) -> np.ndarray:
    return np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)


def term_errors(records, runtimes) -> dict[str, np.ndarray]:
    """|error| per term over every GPU × C × B (Tp, Tq, Tv: median over γ; speedup at the best γ) and per
    host-bound step (overhead), each GPU priced by ``runtimes[gpu]``."""
    points = compare_steps(records, MODE, runtimes=runtimes)
    steps = step_set(records, MODE)
    host = []
    for gpu, rt in sorted(runtimes.items()):
        one = steps.subset(steps.gpu == gpu)
        bound = one.batch * one.context_tokens <= HOST_BOUND_POSITIONS
        host.append(_err(one.table.ms(rt)[bound], one.measured_ms[bound]))
    return {
        "Tp": _err([p.tp_pred_ms for p in points], [p.tp_ms for p in points]),
        "Tq": _err([p.tq_pred_ms for p in points], [p.tq_ms for p in points]),
        "Tv": np.array([p.tv_err for p in points]),
        "overhead": np.concatenate(host),
        "speedup": np.abs([p.error for p in points]),
        "gpu": np.array([p.gpu for p in points]),
        "disturbed": np.array([p.v_at_best < 1 for p in points]),
    }


def columns(errs: dict[str, np.ndarray]) -> dict[str, str]:
    """Row label -> "median (max)" |error|, per term and for the speedup over all B x C and per GPU."""
    cell = {t: _cell(errs[t]) for t in ("Tp", "Tq", "Tv", "overhead", "speedup")}
    for gpu in sorted(set(errs["gpu"])):
        cell[f"speedup, {gpu}"] = _cell(errs["speedup"][errs["gpu"] == gpu])
    cell["speedup, measured v >= 1"] = _cell(errs["speedup"][~errs["disturbed"]])
    return cell


def _cell(e: np.ndarray) -> str:
    return f"{np.median(e):6.1%} ({e.max():6.1%})"


def ibed_appendix_g(rt) -> list[str]:
    """IbED's Appendix G (Lee et al. 2024): the 68M draft on an A100, prefill of 200/1200/2200 tokens
    35.6/35.7/35.7 ms, a decode step 27.1 ms (sequence length 200, batch 1), against this runtime."""
    from specsim.costs.pass_cost import DRAFT, PREFILL
    from specsim.validation.gpu_steps import PAIR

    cost = step_cost("NVIDIA H100 80GB HBM3", rt, device="a100-80gb-sxm")
    out = [f"IbED Appendix G, {PAIR} draft on a100-80gb-sxm (published ms / predicted ms):"]
    for tokens, published in ((200, 35.6), (1200, 35.7), (2200, 35.7)):
        ms = float(cost.pass_ms(DRAFT, tokens, 0, 1, kind=PREFILL).ms)
        out.append(f"  prefill {tokens:5d} tokens: {published:5.1f} / {ms:5.2f}")
    ms = float(cost.pass_ms(DRAFT, 1, 200, 1).ms)
    out.append(f"  decode step at 200 tokens: {27.1:5.1f} / {ms:5.2f}")
    return out


def _write(rt, records) -> Path:
    """The fit on every GPU's steps, written into the shipped runtime file."""
    gpus = ", ".join(sorted({r["provenance"]["gpu"] for r in records}))
    source = f"fitted: `{FIT_COMMAND}` on our HF steps (specsim/data/gpu_steps, {gpus})"
    fitted = fit_steps(rt, step_set(records, MODE), STARTS, source)
    return write_json_atomic(RUNTIMES_DIR / "hf-eager.json", fitted.to_json())


def _has_mode(record) -> bool:
    return any(p["mode"] == MODE for p in record["points"])


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--before", type=name_arg, help="runtime file to print the errors of before the refit (priced as is)"
    )
    p.add_argument("--write", action="store_true", help="write the fit on every GPU into the runtime file")
    args = p.parse_args(argv)
    before = load_runtime(args.before) if args.before else None  # a bad file is refused before the fits
    records = [r for r in load_records() if _has_mode(r)]
    gpus = sorted({r["provenance"]["gpu"] for r in records})
    rt, steps = load_runtime("hf-eager"), step_set(records, MODE)
    fits = leave_one_gpu_out(rt, steps, STARTS)
    table = {"after: max(host, device)": columns(term_errors(records, fits))}
    summed = leave_one_gpu_out(replace(rt, host_overlap=0.0), steps, STARTS)
    table["after: host + device"] = columns(term_errors(records, summed))
    if before is not None:
        table = {"before": columns(term_errors(records, dict.fromkeys(gpus, before)))} | table
    print("|error| median (max); after: each GPU priced by the fit on the other GPU's steps")
    print(f"{'term':34s}" + "".join(f"{name:>26s}" for name in table))
    for row in next(iter(table.values())):
        print(f"{row:34s}" + "".join(f"{col[row]:>26s}" for col in table.values()))
    for gpu, fit in fits.items():
        print(f"fit without {gpu}: " + ", ".join(f"{k} {getattr(fit, k):.4g}" for k in STARTS))
    if args.write:
        print(f"wrote {_write(rt, records)}")
    print("\n".join(ibed_appendix_g(load_runtime("hf-eager"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
