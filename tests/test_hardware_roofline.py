"""Roofline numbers against hand-computed cases, the memory/compute crossover, memory fit."""

import numpy as np
import pytest

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import spec_from_config
from specsim.hardware.roofline import (
    USABLE_MEMORY_FRACTION,
    Efficiency,
    attention_flops,
    compute_bound,
    decode_ms,
    forward_bytes,
    forward_flops,
    forward_ms,
    kv_pass_bytes,
    prefill_ms,
    verify_ms,
    vision_ms,
)

LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}
IDEAL = Efficiency(compute=1.0, memory=1.0, overhead_ms=0.0, overhead_ms_per_layer=0.0, source="test")


def device(bw: float, flops: float, mem: float = 80e9) -> Device:
    return Device(
        name="test",
        display_name="test",
        kind="gpu",
        memory_bandwidth_bytes_per_s=bw,
        peak_flops_per_s=flops,
        memory_bytes=mem,
    )


def test_7b_fp16_decode_on_2tbps_is_about_7ms():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    # 6.74B params x 2 bytes ~ 13.5 GB; the embedding rows are a gather, so ~13.2 GB is read per step.
    weights = (32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096) * 2
    assert weights == pytest.approx(13.21e9, rel=1e-3)
    t = decode_ms(m, device(2e12, 1e18), IDEAL, context=0)
    assert t == pytest.approx(weights / 2e12 * 1e3, rel=0.02)  # activations add < 2%
    assert 6.5 < t < 7.2


def test_decode_flops_match_hand_count():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    ctx = 1000
    hand = 2 * 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 2 * 32000 * 4096 + 4 * 32 * 32 * 128 * (ctx + 1)
    assert forward_flops(m, 1, ctx, 1) == pytest.approx(hand, rel=1e-12)
    assert forward_flops(m, 8, ctx, 1) == pytest.approx(8 * hand, rel=1e-12)


def test_kv_cache_bytes_and_growth_with_context():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    assert m.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2  # layers x KV heads x head dim x (K,V) x 2 bytes
    extra = forward_bytes(m, 4, 3000, 1) - forward_bytes(m, 4, 1000, 1)
    assert extra == pytest.approx(4 * 2000 * m.kv_bytes_per_token)


def test_prefill_is_compute_bound_and_matches_flops_over_peak():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    h100 = device(3.35e12, 989e12)
    s = 2048
    flops = forward_flops(m, 1, 0, s, logits=1)
    assert flops == pytest.approx(
        2 * 32 * (4 * 4096**2 + 3 * 4096 * 11008) * s + 2 * 32000 * 4096 + 4 * 32 * 32 * 128 * s * (s + 1) / 2
    )
    assert bool(compute_bound(m, h100, IDEAL, 1, 0, s, logits=1))
    assert prefill_ms(m, h100, IDEAL, s) == pytest.approx(flops / 989e12 * 1e3)


def test_decode_crossover_near_ridge_point_without_kv():
    """Decode turns compute-bound where batch ~ peak/bandwidth (1 FLOP per weight byte per sequence in
    FP16)."""
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    h100 = device(3.35e12, 989e12)
    ridge = h100.ridge_flops_per_byte  # 295 FLOP/byte
    batches = np.arange(1, 1024)
    bound = compute_bound(m, h100, IDEAL, batches, 0, 1)
    crossover = int(batches[np.argmax(bound)])
    # Activation traffic grows with the batch too, which pushes the crossover up a little.
    assert ridge <= crossover <= 1.3 * ridge
    assert not bound[: int(ridge) - 1].any() and bound[crossover - 1 :].all()


def test_mha_decode_at_long_context_stays_memory_bound():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    h100 = device(3.35e12, 989e12)
    assert not compute_bound(m, h100, IDEAL, np.array([1, 64, 1024]), 4096, 1).any()


def test_crossover_moves_with_efficiency_ratio():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    dev = device(2e12, 400e12)
    batches = np.arange(1, 2048)
    first = lambda eff: int(batches[np.argmax(compute_bound(m, dev, eff, batches, 0, 1))])  # noqa: E731
    assert first(Efficiency(compute=0.5, memory=1.0)) < first(Efficiency(compute=1.0, memory=1.0))


def test_verify_cost_close_to_decode_when_memory_bound_and_vectorised():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    h100 = device(3.35e12, 989e12)
    tp = decode_ms(m, h100, Efficiency(), 1024)
    tv = verify_ms(m, h100, Efficiency(), np.arange(1, 9), 1024)
    assert tv.shape == (8,) and np.all(np.diff(tv) > 0)
    assert 1.0 < tv[4] / tp < 1.05  # v(5) ~ 1: six positions cost about one at batch 1
    grid = decode_ms(m, h100, Efficiency(), np.array([[128], [4096]]), np.array([1, 8, 64]))
    assert grid.shape == (2, 3) and np.all(np.diff(grid, axis=1) > 0) and np.all(grid[1] > grid[0])


def test_matmul_compute_does_not_hide_under_kv_bytes():
    """A large batch's verify pass: the matmuls are compute-bound while the KV cache's bytes dominate the
    pass. The attention kernels run between the matmuls, so the pass costs roof(matmuls) +
    roof(attention), not the whole pass's max (which would price the verify rows as free)."""
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    dev = device(3.35e12, 989e12)
    batch, context, new = 192, 1024, 6  # γ = 5
    flops, nbytes = forward_flops(m, batch, context, new), forward_bytes(m, batch, context, new)
    a_flops = attention_flops(m, batch, context, new)
    kv = kv_pass_bytes(m, batch, context, new)
    split = (max(flops - a_flops, 0) / 989e12 + max(a_flops / 989e12, kv / 3.35e12)) * 1e3
    matmul_ms, kv_ms = (flops - a_flops) / 989e12 * 1e3, kv / 3.35e12 * 1e3
    assert matmul_ms > (nbytes - kv) / 3.35e12 * 1e3 and kv_ms > matmul_ms  # the case this test is about
    got = forward_ms(m, dev, IDEAL, batch, context, new)
    assert got == pytest.approx((flops - a_flops) / 989e12 * 1e3 + kv_ms, rel=1e-12)
    assert got == pytest.approx(split, rel=1e-12)
    assert got > max(flops / 989e12, nbytes / 3.35e12) * 1e3 * 1.1  # the whole-pass max is >10% short


def test_overhead_is_added_per_pass():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    dev = device(2e12, 1e15)
    base = decode_ms(m, dev, IDEAL, 0)
    with_overhead = decode_ms(m, dev, Efficiency(1.0, 1.0, 0.5, 0.01), 0)
    assert with_overhead - base == pytest.approx(0.5 + 0.32)


def test_fits_memory():
    from specsim.hardware.parallel import per_gpu_resident_bytes

    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    usable = USABLE_MEMORY_FRACTION * 24e9  # an L4
    assert per_gpu_resident_bytes(m, None, 1, 1024, 1, None) <= usable
    assert per_gpu_resident_bytes(m, None, 64, 8192, 1, None) > usable


def test_vision_tower_time_positive_and_zero_without_images():
    cfg = {
        "model_type": "llava",
        "text_config": LLAMA2_7B,
        "vision_config": {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
        },
    }
    m = spec_from_config(cfg, "llava")
    dev = device(3.35e12, 989e12)
    one, zero, five = vision_ms(m.vision, 2, dev, IDEAL, np.array([1, 0, 5]))
    assert zero == 0.0 and one > 0 and five == pytest.approx(5 * one, rel=0.2)


def test_bad_inputs_raise():
    m = spec_from_config(LLAMA2_7B, "llama2-7b")
    with pytest.raises(SpecsimError, match="batch"):
        decode_ms(m, device(1e12, 1e14), IDEAL, 100, batch=0)
    with pytest.raises(SpecsimError, match="efficiency.memory"):
        Efficiency(memory=0.0)
    with pytest.raises(SpecsimError, match="efficiency.overhead_ms"):
        Efficiency(overhead_ms="fast")
    assert Efficiency.from_json(Efficiency().to_json()) == Efficiency()
