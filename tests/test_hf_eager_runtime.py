"""The hf-eager runtime: host time against device time, DynamicCache's concatenation, fitted on our own GPU HF
steps (specsim/data/gpu_steps) and scored leave one GPU out; IbED's figures as outside checks."""

from dataclasses import replace

import numpy as np
import pytest

from specsim.costs.pass_cost import DRAFT, PREFILL, TARGET
from specsim.hardware.device import load_device
from specsim.hardware.roofline import forward_ms, kv_concat_ms
from specsim.hardware.runtime import load_runtime
from specsim.validation.gpu_steps import compare_steps, load_records, step_cost
from specsim.validation.published_set import load_published_set
from specsim.validation.step_fit import STEP_FIT, fit_steps, held_out_points, leave_one_gpu_out, step_set

MODE, STARTS = STEP_FIT["hf-eager"]


@pytest.fixture(scope="module")
def records():
    return [r for r in load_records() if any(p["mode"] == MODE for p in r["points"])]


def _speedup_errors(points) -> np.ndarray:
    return np.abs([p.error for p in points])


def test_leave_one_gpu_out_beats_the_runtime_it_replaces(records):
    """Each GPU priced by the fit on the other: Tp and Tv within a median 5 %, the best-γ speedup within a
    median 8 % (it was 19 % on the H200 and 37 % on the H100 before the host/device split), the H100's
    within 15 % at every batch."""
    points = held_out_points(records, "hf-eager")
    tp = np.abs([p.tp_pred_ms / p.tp_ms - 1 for p in points])
    assert np.median(tp) <= 0.05 and np.median([p.tv_err for p in points]) <= 0.05
    assert np.median(_speedup_errors(points)) <= 0.08
    h100 = _speedup_errors([p for p in points if "H100" in p.gpu])
    assert len(h100) == 4 and h100.max() <= 0.15


def test_max_of_host_and_device_fits_the_steps_better_than_their_sum(records):
    """The measured steps are flat in batch and context until the device's time passes the host's: the max
    of the two prices Tp far better than their sum, both fitted leave one GPU out."""
    steps = step_set(records, MODE)
    rt = load_runtime("hf-eager")

    def tp_error(runtime):
        points = compare_steps(records, MODE, runtimes=leave_one_gpu_out(runtime, steps, STARTS))
        return np.median([abs(p.tp_pred_ms / p.tp_ms - 1) for p in points])

    assert rt.host_overlap == 1.0
    assert tp_error(rt) < 0.5 * tp_error(replace(rt, host_overlap=0.0))


def test_a_held_out_gpu_never_shapes_its_own_prices(records):
    """Scaling one GPU's measured steps moves the fit without it not at all, and the fit on it."""
    steps = step_set(records, MODE)
    rt = load_runtime("hf-eager")
    h200 = steps.gpu == "NVIDIA H200"
    scaled = replace(steps, measured_ms=np.where(h200, steps.measured_ms * 1.3, steps.measured_ms))
    fits, moved = leave_one_gpu_out(rt, steps, STARTS), leave_one_gpu_out(rt, scaled, STARTS)
    keys = list(STARTS)
    held = [getattr(fits["NVIDIA H200"], k) for k in keys]
    assert [getattr(moved["NVIDIA H200"], k) for k in keys] == pytest.approx(held, rel=1e-9)
    other = fits["NVIDIA H100 80GB HBM3"].overhead_ms_per_layer
    assert moved["NVIDIA H100 80GB HBM3"].overhead_ms_per_layer > 1.1 * other


def test_the_shipped_file_holds_the_fit_on_every_gpu(records):
    """`bench/hf_eager_fit.py --write` wrote the fit on both GPUs' steps, each field naming the command."""
    rt = load_runtime("hf-eager")
    fitted = fit_steps(rt, step_set(records, MODE), STARTS, "x")
    for key in STARTS:
        assert getattr(rt, key) == pytest.approx(getattr(fitted, key), rel=1e-6), key
        assert "bench/hf_eager_fit.py --write" in rt.sources[key]
    assert rt.fit == ()  # nothing fitted on the published set: its HF rows test it held out


def test_host_bound_batch_one_and_the_concatenation_growing_with_the_cache():
    """At batch 1 a 7B target's HF step is the host's time on any GPU with the bandwidth to keep up; the
    DynamicCache's copy grows with batch × context, and costs nothing under a runtime that writes K/V in
    place."""
    rt = load_runtime("hf-eager")
    cost = step_cost("NVIDIA H200", rt)
    host = rt.overhead_ms_per_forward + rt.overhead_ms_per_layer * cost.target.layers
    for dev in ("h100-sxm", "h200", "a100-80gb-sxm"):
        assert forward_ms(cost.target, load_device(dev), rt, 1, 1024, 1) == pytest.approx(host)
    h200 = load_device("h200")
    concat = [kv_concat_ms(cost.target, h200, rt, b, c, 1) for b, c in ((1, 1024), (16, 1024), (16, 2048))]
    assert concat[1] == pytest.approx(16 * concat[0], rel=1e-3) and concat[2] > 1.9 * concat[1]
    assert kv_concat_ms(cost.target, h200, load_runtime("vllm"), 16, 1024, 1) == 0


def test_ibed_appendix_g_draft_is_host_bound_as_published():
    """IbED Appendix G (Lee et al. 2024, 68M draft on an A100): prefill of 200, 1200 and 2200 tokens takes
    35.6, 35.7, 35.7 ms, flat in the length, and a decode step less. The runtime prices the draft host-bound
    too: flat prefill, a decode step below it; its level is the host's (a few ms on our H100/H200 hosts,
    where the paper's is 35.6 ms)."""
    cost = step_cost("NVIDIA H100 80GB HBM3", load_runtime("hf-eager"), device="a100-80gb-sxm")
    prefill = [float(cost.pass_ms(DRAFT, n, 0, 1, kind=PREFILL).ms) for n in (200, 1200, 2200)]
    decode = float(cost.pass_ms(DRAFT, 1, 200, 1).ms)
    assert max(prefill) / min(prefill) < 1.01 and decode < prefill[0]
    assert float(cost.pass_ms(TARGET, 1, 200, 1).ms) > 4 * decode


def test_ibed_speedups_are_tau_over_one_plus_gamma_sixteenths():
    """Why the published HF rows miss: every IbED Table 1b speedup is its τ / (1 + 5/16) to the printed two
    decimals (a draft costing 2 of the target's 32 layers, v = 1), over contexts of 710 to 3014 tokens and
    drafts seeing 134 to 3014; a wall-clock measurement would move with them."""
    rows = [r for r in load_published_set().rows if r.source == "ibed"]
    assert len(rows) == 16
    for r in rows:
        assert r.tau / (1 + r.gamma * 2 / 32) == pytest.approx(r.speedup, abs=0.006), r.id


def test_runtimes_without_host_against_device_write_what_they_wrote_before():
    """The new fields are additive: a runtime that leaves them at their neutral values writes none of them
    (its file, and a fit's JSON, stay as they were); hf-eager's round-trip."""
    from specsim.hardware.runtime import Runtime

    new = ("host_overlap", "overhead_ms_per_mask", "masked_attention_factor", "device_ms_per_layer")
    new += ("kv_concat_int32_ops_per_element",)
    for name in ("vllm", "gpt-fast", "llama.cpp", "torch-cpu"):
        assert not set(new) & set(load_runtime(name).to_json()), name
    rt = load_runtime("hf-eager")
    back = Runtime.from_json(rt.to_json())
    assert [getattr(back, k) for k in new] == [getattr(rt, k) for k in new]
