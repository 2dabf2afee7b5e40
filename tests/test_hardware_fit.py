"""Fitting efficiencies/overhead: recovers known values from synthetic data; held-out validation."""

import numpy as np
import pytest

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.efficiency_fit import (
    fit_efficiency,
    holdout,
    points_from_latency,
    predict_points,
    short_context_split,
)
from specsim.hardware.model import spec_from_config
from specsim.hardware.roofline import Efficiency, decode_ms, prefill_ms, verify_ms
from specsim.profile_format import Curve, LatencySection

TARGET = spec_from_config(
    {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "t",
    dtype="float32",
)
DRAFT = spec_from_config(
    {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "d",
    dtype="float32",
)
MODELS = {"target": TARGET, "draft": DRAFT}
DEV = Device(
    name="box",
    display_name="box",
    kind="cpu",
    memory_bandwidth_bytes_per_s=20e9,
    peak_flops_per_s=400e9,
    memory_bytes=64e9,
    peak_flops_dtype="fp32",
)
TRUE = Efficiency(compute=0.35, memory=0.7, overhead_ms=2.0, overhead_ms_per_layer=0.0, source="truth")
CTX = (64.0, 256.0, 1024.0, 2048.0)
PROMPTS = (16.0, 64.0, 256.0, 1024.0)


def synthetic_latency(
    eff: Efficiency, rng: np.random.Generator | None = None, noise: float = 0.0
) -> LatencySection:
    """The tables calibrate would measure if the machine followed the roofline exactly (times lognormal
    noise)."""

    def curve(x, ms):
        ms = np.asarray(ms, dtype=float)
        if rng is not None:
            ms = ms * np.exp(rng.normal(0.0, noise, ms.shape))
        return Curve(tuple(float(v) for v in x), tuple(float(v) for v in ms))

    gammas = np.arange(1, 9, dtype=float)
    return LatencySection(
        target_decode_ms_by_context=curve(CTX, decode_ms(TARGET, DEV, eff, np.array(CTX))),
        draft_decode_ms_by_context=curve(CTX, decode_ms(DRAFT, DEV, eff, np.array(CTX))),
        target_prefill_ms_by_tokens=curve(PROMPTS, prefill_ms(TARGET, DEV, eff, np.array(PROMPTS))),
        draft_prefill_ms_by_tokens=curve(PROMPTS, prefill_ms(DRAFT, DEV, eff, np.array(PROMPTS))),
        target_verify_ms_by_gamma=curve(gammas, verify_ms(TARGET, DEV, eff, gammas, 256)),
        draft_decode_ms_by_batch=curve(
            (1.0, 2.0, 4.0, 8.0), decode_ms(DRAFT, DEV, eff, 256, np.array([1, 2, 4, 8]))
        ),
        verify_context_tokens=256,
    )


def test_points_from_latency_covers_every_table():
    points, skipped = points_from_latency(synthetic_latency(TRUE))
    assert len(points) == 4 + 4 + 4 + 4 + 8 + 4 and not skipped
    verify = [p for p in points if p.phase == "verify"]
    assert [p.new_tokens for p in verify] == [g + 1 for g in range(1, 9)]  # γ+1 positions (DESIGN.md)
    assert all(p.context_tokens == 256 for p in verify)
    _, skipped = points_from_latency(LatencySection(target_verify_ms_by_gamma=Curve((1.0, 2.0), (5.0, 6.0))))
    assert skipped and "verify_context_tokens" in skipped[0]


def test_fit_recovers_known_efficiencies_exactly():
    points, _ = points_from_latency(synthetic_latency(TRUE))
    fit = fit_efficiency(points, MODELS, DEV)
    assert fit.efficiency.compute == pytest.approx(0.35, rel=1e-3)
    assert fit.efficiency.memory == pytest.approx(0.7, rel=1e-3)
    assert fit.efficiency.overhead_ms == pytest.approx(2.0, rel=1e-3)
    assert fit.max_abs_rel_error < 1e-4 and all(fit.constrained.values())
    assert any(r.compute_bound for r in fit.rows) and not all(r.compute_bound for r in fit.rows)


def test_fit_with_noise_and_per_layer_overhead():
    truth = Efficiency(compute=0.5, memory=0.6, overhead_ms=1.0, overhead_ms_per_layer=0.1)
    points, _ = points_from_latency(synthetic_latency(truth, np.random.default_rng(7), noise=0.02))
    fit = fit_efficiency(
        points, MODELS, DEV, free=("compute", "memory", "overhead_ms", "overhead_ms_per_layer")
    )
    e = fit.efficiency
    assert e.compute == pytest.approx(0.5, rel=0.08) and e.memory == pytest.approx(0.6, rel=0.08)
    # Total per-pass overhead of the target is what the data pins (28 vs 24 layers barely separate the terms).
    assert e.overhead_ms + 28 * e.overhead_ms_per_layer == pytest.approx(1.0 + 2.8, rel=0.15)
    assert fit.rms_rel_error < 0.04


def test_memory_bound_only_data_leaves_compute_unconstrained():
    lat = synthetic_latency(TRUE)
    only_decode = LatencySection(
        target_decode_ms_by_context=lat.target_decode_ms_by_context,
        draft_decode_ms_by_context=lat.draft_decode_ms_by_context,
    )
    points, _ = points_from_latency(only_decode)
    fit = fit_efficiency(points, MODELS, DEV)
    assert fit.constrained["memory"] and not fit.constrained["compute"]
    assert fit.efficiency.memory == pytest.approx(0.7, rel=1e-3)


def test_holdout_predicts_long_contexts_and_other_gamma():
    points, _ = points_from_latency(synthetic_latency(TRUE, np.random.default_rng(1), noise=0.01))
    split = short_context_split(points)
    result = holdout(points, MODELS, DEV, split)
    held = {r.label for r in result.held_out}
    assert "target decode ctx=2048" in held and "target verify gamma=8 ctx=256" in held
    assert "target decode ctx=64" not in held
    assert result.rms_rel_error < 0.05
    assert result.to_json()["held_out_rms_rel_error"] == result.rms_rel_error


def test_fit_against_a_wrong_peak_is_visible_in_the_error():
    """The fit cannot hide a model that does not fit the data: a curved decode curve vs a flat model."""
    points, _ = points_from_latency(synthetic_latency(TRUE))
    fit = fit_efficiency(points, {"target": TARGET.with_dtype(2), "draft": DRAFT}, DEV)
    assert fit.max_abs_rel_error > 0.05
    assert np.all(predict_points(points, MODELS, DEV, TRUE) > 0)


def test_fit_bad_inputs():
    with pytest.raises(SpecsimError, match="no latency points"):
        fit_efficiency([], MODELS, DEV)
    points, _ = points_from_latency(synthetic_latency(TRUE))
    with pytest.raises(SpecsimError, match="free parameters"):
        fit_efficiency(points, MODELS, DEV, free=("speed",))
    with pytest.raises(SpecsimError, match="no model description for the draft"):
        fit_efficiency(points, {"target": TARGET}, DEV)
    with pytest.raises(SpecsimError, match="both sides"):
        holdout(points, MODELS, DEV, lambda p: True)
