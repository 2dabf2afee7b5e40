"""The planner against this project's own GPU step timings: LLaVA-1.5-7B and its 68M draft on an H100 and an
H200 (``specsim/data/gpu_steps``, measured by ``bench/gpu_step_kernels.py``; provenance in each file).

Median ms of one step (``graph`` or ``hf-eager``) per model × context × batch × rows (γ+1), against the
planner's Tp, Tq, Tv(γ) and best-γ speedup, with IbED's τ (Lee et al. 2024, method M, ChartQA):
    speedup(γ) = τ(γ)·Tp / (γ·Tq + Tv(γ))           (measured steps, or the planner's)
``speedup_pred`` leaves out the runtime's per-block overhead; ``speedup_pred_full`` adds it.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.acceptance.theory import block_speedup, sd_block_ms
from specsim.errors import SpecsimError

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu_steps"
RUNTIME_OF_MODE = {"graph": "vllm", "eager": "gpt-fast", "hf-eager": "hf-eager"}
DEVICE_OF_GPU = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H100 PCIe": "h100-pcie"}
PAIR, PROFILE, METHOD, SCENARIO = "llava-1.5-7b-68m", "ibed-llava1.5-7b-68m", "M", "ChartQA"


@dataclass(frozen=True)
class StepPoint:
    """One B × C of one GPU and mode: measured and planned terms (ms), v at the measured best γ, and best-γ
    speedups (measured; planned without and with the runtime's per-block overhead)."""

    gpu: str
    mode: str
    runtime: str
    context_tokens: int
    batch: int
    tp_ms: float
    tp_pred_ms: float
    tq_ms: float
    tq_pred_ms: float
    gamma_best: int
    v_at_best: float
    v_pred_at_best: float
    tv_err: float  # median |Tv pred / Tv meas − 1| over the measured γ
    speedup: float
    speedup_pred: float
    gamma_pred: int
    speedup_pred_full: float

    @property
    def error(self) -> float:
        """Planned (kernels only) over measured best-γ speedup, − 1."""
        return self.speedup_pred / self.speedup - 1.0


def load_records(paths=None) -> list[dict]:
    """The step-timing files (default: every one shipped), each a dict with ``provenance`` and ``points``."""
    files = sorted(DATA_DIR.glob("*.json")) if paths is None else [Path(p) for p in paths]
    if not files:
        raise SpecsimError(f"no GPU step timings in {DATA_DIR}")
    return [json.loads(f.read_text(encoding="utf-8")) for f in files]


def step_cost(gpu: str, runtime=None, device: str | None = None):
    """The pair's passes on ``gpu`` (a provenance name; ``device`` overrides its catalog device) under
    ``runtime`` (None: terms only, :meth:`~specsim.hardware.roofline_pass_cost.RooflinePassCost.terms`)."""
    from specsim.hardware.device import load_device
    from specsim.hardware.model_resolution import load_model_spec
    from specsim.hardware.roofline_pass_cost import RooflinePassCost
    from specsim.presets import pair_models

    dev_name = device or DEVICE_OF_GPU.get(gpu)
    if dev_name is None:
        raise SpecsimError(f"GPU {gpu!r} of the step timings: expected one of {sorted(DEVICE_OF_GPU)}")
    target, draft = (load_model_spec(n) for n in pair_models(PAIR))
    return RooflinePassCost(target, draft, load_device(dev_name), runtime)


def compare_steps(
    records, mode: str, runtime: str | None = None, device: str | None = None, runtimes=None
) -> list[StepPoint]:
    """One :class:`StepPoint` per GPU × C × B of ``mode`` in ``records`` (module docstring); ``runtime``
    and ``device`` override the mode's runtime and the GPU's catalog device; ``runtimes`` (GPU -> Runtime)
    prices each GPU with its own (a fit that left that GPU out)."""
    from specsim.costs.pass_cost import DRAFT, TARGET
    from specsim.hardware.runtime import load_runtime
    from specsim.predict.acceptance_source import MethodTau
    from specsim.profiles import load_profile

    (entry,) = load_profile(PROFILE).select_entries([METHOD], SCENARIO)
    mt = MethodTau.from_entry(entry, range(1, 9))
    tau_of = dict(zip(mt.gammas, mt.tau))
    name = runtime or RUNTIME_OF_MODE[mode]
    eff = None if runtimes else load_runtime(name)
    out = []
    for gpu in sorted({r["provenance"]["gpu"] for r in records}):
        if runtimes and gpu not in runtimes:
            continue  # no fit prices this GPU (it has no steps of the mode)
        cost = step_cost(gpu, runtimes[gpu] if runtimes else eff, device)
        ms = {
            (p["model"], p["context_tokens"], p["batch"], p["rows"]): p["ms_median"]
            for r in records
            if r["provenance"]["gpu"] == gpu
            for p in r["points"]
            if p["mode"] == mode
        }
        for c, b in sorted({(k[1], k[2]) for k in ms if k[0] == "target"}):
            gammas = [k[3] - 1 for k in ms if k[:3] == ("target", c, b) and k[3] > 1 and k[3] - 1 in tau_of]
            if ("target", c, b, 1) not in ms or ("draft", c, b, 1) not in ms or not gammas:
                continue
            g = np.asarray(sorted(gammas), dtype=float)
            tau = np.asarray([tau_of[int(x)] for x in g])
            tp, tq = ms["target", c, b, 1], ms["draft", c, b, 1]
            tv = np.asarray([ms["target", c, b, int(x) + 1] for x in g])
            tp_p, tq_p = (float(cost.pass_ms(role, 1, c, b).ms) for role in (TARGET, DRAFT))
            tv_p = np.asarray(cost.pass_ms(TARGET, g + 1, c, b).ms, dtype=float)
            forwards = g + cost.extra_draft_forwards
            s = block_speedup(tau, tp, sd_block_ms(g, tq, tv))
            s_p = block_speedup(tau, tp_p, sd_block_ms(forwards, tq_p, tv_p))
            s_f = block_speedup(tau, tp_p, sd_block_ms(forwards, tq_p, tv_p, cost.block_overhead_ms(g, b)))
            k, k_p = int(np.argmax(s)), int(np.argmax(s_p))
            out.append(
                StepPoint(
                    gpu=gpu,
                    mode=mode,
                    runtime=name,
                    context_tokens=int(c),
                    batch=int(b),
                    tp_ms=tp,
                    tp_pred_ms=tp_p,
                    tq_ms=tq,
                    tq_pred_ms=tq_p,
                    gamma_best=int(g[k]),
                    v_at_best=tv[k] / tp,
                    v_pred_at_best=float(tv_p[k] / tp_p),
                    tv_err=float(np.median(np.abs(tv_p / tv - 1))),
                    speedup=float(s[k]),
                    speedup_pred=float(s_p[k_p]),
                    gamma_pred=int(g[k_p]),
                    speedup_pred_full=float(s_f.max()),
                )
            )
    return out


def crossover_text(points, key: str = "speedup") -> str:
    """Per GPU and context, the batch from which the ``key`` speedup stays below 1, read as the planner and
    the published sweeps read theirs (:func:`specsim.hardware.batch_limit.paying_range`): "never up to B=…"
    when it still pays at the largest measured batch, "never pays" when it pays at none."""
    from specsim.hardware.batch_limit import paying_range

    groups: dict[tuple, list] = {}
    for p in points:
        groups.setdefault((p.gpu, p.context_tokens), []).append(p)
    parts = []
    for (gpu, c), ps in sorted(groups.items()):
        ps = sorted(ps, key=lambda p: p.batch)
        pays, stops = paying_range([p.batch for p in ps], [getattr(p, key) for p in ps])
        cell = "never pays" if pays is None else (f"never up to B={ps[-1].batch}" if stops is None else stops)
        parts.append(f"{gpu} C={c}: {cell}")
    return "; ".join(parts)
