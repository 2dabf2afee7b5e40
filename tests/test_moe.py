"""Mixture-of-experts targets in the roofline: parameters against the model cards, the experts a pass reads
(hand computations), and MoE configs specsim cannot read refused in one line, never priced as dense."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specsim.errors import SpecsimError, SpecsimWarning
from specsim.hardware.model import ModelSpec, spec_from_config
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.moe import MoESpec
from specsim.hardware.roofline import (
    forward_bytes,
    forward_flops,
    sharded_bytes,
    streamed_weight_bytes,
    streamed_weights,
)


@pytest.mark.parametrize(
    "name, total_b, active_b",
    [
        # Qwen/Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in total and 3.3B activated"
        ("Qwen/Qwen3-30B-A3B", 30.5, 3.3),
        # Mistral AI, "Mixtral of experts" (2023-12-11): "46.7B total parameters but only uses 12.9B
        # parameters per token"
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7, 12.9),
    ],
)
def test_shipped_moe_models_match_their_cards(name, total_b, active_b):
    m = load_model_spec(name)
    assert m.moe is not None
    assert m.params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.02)


def test_a_pass_reads_the_experts_its_tokens_touch():
    """E = 8, k = 2: one token reads 2 experts, 4 tokens 8·(1 − 0.75⁴) = 5.46875, many tokens all 8."""
    moe = MoESpec(experts=8, per_token=2, expert_intermediate=10, shared_intermediate=0, layers=1)
    assert moe.touched_experts(1) == pytest.approx(2.0)
    assert moe.touched_experts(4) == pytest.approx(5.46875)
    assert moe.touched_experts(1000) == pytest.approx(8.0)


def _tiny(moe: MoESpec | None, intermediate: int = 10) -> ModelSpec:
    return ModelSpec("tiny", layers=2, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=intermediate,
                     vocab=16, moe=moe)  # fmt: skip


def test_weights_and_flops_of_a_moe_pass_by_hand():
    """Two layers, one of them MoE (E 8, k 2, experts 10 wide, a shared expert 6 wide): attention 2·4·4 +
    2·4·2 = 48 per layer; the dense layer's MLP 3·4·10 = 120; per MoE layer the router 4·8 = 32, the shared
    expert 3·4·6 = 72 and each expert 120; the LM head 16·4 = 64."""
    m = _tiny(MoESpec(8, 2, 10, 6, layers=1))
    dense_layer, fixed = 48 + 120, 48 + 32 + 72
    assert m.decoder_params == dense_layer + fixed + 8 * 120
    assert m.active_decoder_params == dense_layer + fixed + 2 * 120
    assert streamed_weights(m, 1) == pytest.approx(dense_layer + fixed + 2 * 120 + 64)
    assert streamed_weights(m, 4) == pytest.approx(dense_layer + fixed + 5.46875 * 120 + 64)
    # FLOPs per token: the routed experts only (2 · active weights per row, plus the LM head's)
    no_attention = forward_flops(m, 1, 0, 1) - 4.0 * 2 * 2 * 2 * 1
    assert no_attention == pytest.approx(2.0 * (dense_layer + fixed + 2 * 120) + 2.0 * 64)
    # a verify pass of 4 rows reads more expert bytes per row than a decode pass, fewer in all than 4 decodes
    one, four = forward_bytes(m, 1, 0, 1), forward_bytes(m, 1, 0, 4)
    assert one < four < 4 * one


def test_a_dense_model_streams_every_weight_at_any_rows():
    m = _tiny(None)
    assert m.active_decoder_params == m.decoder_params == 2 * m.layer_params
    assert streamed_weights(m, 1) == streamed_weights(m, 64) == m.decoder_params + 64


def test_qwen3_moe_layers_follow_mlp_only_layers_and_the_sparse_step():
    cfg = {
        "model_type": "qwen3_moe", "hidden_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 32, "intermediate_size": 24, "moe_intermediate_size": 4,
        "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3],
    }  # fmt: skip
    moe = spec_from_config(cfg, "q").moe
    assert (moe.experts, moe.per_token, moe.expert_intermediate, moe.layers) == (4, 2, 4, 1)  # layer 1 only


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"model_type": "qwen3_next", "num_experts": 512}, r"model_type 'qwen3_next': expected one of"),
        (
            {"num_local_experts": 8, "kv_lora_rank": 512},
            r"qk_nope_head_dim: expected an integer >= 1, got None",
        ),
        ({"num_local_experts": 2, "num_experts_per_tok": 4}, r"num_experts_per_tok: expected at most"),
        ({"num_local_experts": 0}, r"num_local_experts: expected an integer >= 1, got 0"),
        ({"num_local_experts": 8, "num_experts_per_tok": None}, r"num_experts_per_tok: expected an integer"),
    ],
)
def test_moe_configs_specsim_cannot_read_are_one_line(extra, match):
    cfg = {
        "model_type": "mixtral",
        "hidden_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "vocab_size": 32,
        "intermediate_size": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    }
    with pytest.raises(SpecsimError, match=match) as err:
        spec_from_config(cfg | extra, "m")
    assert "\n" not in str(err.value)


def test_the_moe_vlm_reads_its_text_model_as_the_moe_text_model_and_its_tower_as_qwen3_vls():
    """Qwen3-VL-30B-A3B-Instruct's text config is Qwen3-30B-A3B's shape (its config.json: 48 layers, 128
    experts, 8 per token, 768 wide); its tower is Qwen3-VL's (27 layers, 16-px patches merged 2x2), read as
    the 8B's, with the merger projecting to 2048."""
    vl, text, dense_vl = (load_model_spec(n) for n in ("qwen3-vl-30b-a3b", "qwen3-30b-a3b", "qwen3-vl-8b"))
    assert (vl.text_params, vl.active_params, vl.moe) == (text.text_params, text.active_params, text.moe)
    assert vl.vision.layers == dense_vl.vision.layers == 27
    assert vl.vision.image_tokens == dense_vl.vision.image_tokens
    assert vl.vision.params < dense_vl.vision.params  # the same tower, a narrower merger output


def test_deepseek_v3_matches_its_card_with_latent_attention_and_shared_experts():
    """DeepSeek-V3 (DeepSeek-AI 2024, the model card and arXiv 2412.19437 §1): "671B total parameters with
    37B activated for each token"; 3 dense layers, then 58 of 256 routed experts (8 a token) plus one shared;
    its cache: 61 layers x (512 latent + 64 RoPE) elements a position."""
    with pytest.warns(SpecsimWarning, match="priced as float8"):  # its config's quantization_config: fp8
        m = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert m.params / 1e9 == pytest.approx(671, rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(37, rel=0.02)
    assert (m.moe.layers, m.moe.shared_intermediate, m.kv_heads) == (58, 2048, 1)
    assert m.kv_bytes_per_token == 61 * 576 * 2  # the cache stays 16-bit beside fp8 weights
    # attention projections by hand: q down/up 7168·1536 + 1536·128·192, kv down 7168·576, kv up 512·128·256,
    # o 128·128·7168
    assert (
        m.attention_params == 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    )
    # absorbed decoding: 2·128·(2·512 + 64) FLOPs a head-position per layer, i.e. 4·heads·544
    assert forward_flops(m, 1, 1000, 1) - forward_flops(m, 1, 0, 1) == pytest.approx(
        61 * 2 * 128 * 1088 * 1000
    )


def test_an_mtp_head_of_a_moe_target_is_one_routed_layer():
    from specsim.hardware.draft_heads import mtp_head

    with pytest.warns(SpecsimWarning):
        target = load_model_spec("deepseek-v3")
    head = mtp_head(target)
    assert (head.layers, head.moe.layers, head.moe.experts) == (1, 1, 256)
    assert (
        head.active_decoder_params == target.attention_params + target.moe.fixed_params(7168) + 8 * 44040192
    )


def test_the_plan_states_what_the_architecture_changes(capsys):
    from specsim.cli.main import main

    args = ["hardware", "--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--alpha", "0.7", "--json"]
    assert main([*args, "--device", "h100-sxm"]) == 0
    said = " ".join(json.loads(capsys.readouterr().out)["plan"]["assumptions"])
    assert "a token multiplies 8 of 128 experts" in said and "sliding window" not in said


def test_published_moe_rows_are_checked_out_of_sample_and_never_fitted():
    """gpt-fast's Mixtral 8x7B table (mixtral-moe/README.md): every row predicted leave-one-source-out, none
    in the rows a runtime is fitted on (dense targets only), so the dense rows' fits are as before."""
    from specsim.validation.published_set import load_published_set
    from specsim.validation.runtime_fit import fit_rows, leave_one_source_out, load_runtimes, usable_rows

    ps = load_published_set()
    moe = {r.id for r in usable_rows(ps)} - {r.id for r in fit_rows(ps)}
    assert moe == {
        f"gpt-fast-mixtral-{d}-tp{g}" for d, gs in (("bf16", (2, 4, 8)), ("int8", (1, 2, 4, 8))) for g in gs
    }
    results = {r.id: r for r in leave_one_source_out(ps, load_runtimes(ps))}
    assert moe <= results.keys()
    # within a factor 2: reading all 8 experts a token (or pricing the 46.7B as dense) would be 3-4x slow
    assert all(0.5 < results[i].predicted / results[i].measured < 2 for i in moe)


GPT_OSS = [("gpt-oss-120b", 116.83, 5.13, 60.8), ("gpt-oss-20b", 20.91, 3.61, 12.8)]


@pytest.mark.parametrize("name, total_b, active_b, checkpoint_gib", GPT_OSS)
def test_gpt_oss_prices_its_mxfp4_experts_as_the_card_states(name, total_b, active_b, checkpoint_gib):
    """OpenAI, gpt-oss-120b & gpt-oss-20b model card (2025-08-05), Table 1: parameters, active parameters
    (the input embedding is a gather, not counted) and checkpoint size, with the MoE weights in MXFP4 (17
    bytes per 32) and the rest in bf16."""
    with pytest.warns(SpecsimWarning, match="routed experts priced as mxfp4"):
        m = load_model_spec(name)
    assert m.params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert (m.active_params - m.embedding_params) / 1e9 == pytest.approx(active_b, rel=0.01)
    assert m.weight_bytes / 2**30 == pytest.approx(checkpoint_gib, rel=0.01)
    assert (m.window, m.window_layers) == (128, m.layers // 2)  # alternating sliding and full attention
    bf16 = m.with_dtype("bfloat16")  # --dtype sets every weight, the experts too
    assert bf16.moe.expert_bytes is None and bf16.weight_bytes == pytest.approx(m.params * 2)
    # a decode pass reads 4 experts a layer in MXFP4; its bytes by hand
    routed = 36 if name.endswith("120b") else 24
    expert = 3 * 2880 * 2880
    want = (
        m.decoder_params - routed * m.moe.experts * expert + 2880 * m.vocab
    ) * 2 + routed * 4 * expert * 17 / 32
    assert streamed_weight_bytes(m, 1) == pytest.approx(want)


def test_expert_parallelism_waits_for_the_busiest_gpu_by_hand():
    """E = 4 experts, k = 2, on 2 GPUs (2 experts each): one token touches each expert with p = 1/2, so a
    GPU reads Binomial(2, 1/2) experts and the busier of the two E[max] = (1 - 1/4²) + (1 - 3/4²)
    = 1.375 experts, where tensor parallelism reads 4 · 1/2 / 2 = 1 expert-equivalent a GPU."""
    moe = MoESpec(experts=4, per_token=2, expert_intermediate=10, shared_intermediate=0, layers=1)
    assert moe.busiest_gpu_experts(1, 2) == pytest.approx(1.375)
    assert moe.busiest_gpu_experts(10_000, 2) == pytest.approx(2.0)  # every expert touched: E / gpus
    m = _tiny(replace(moe, layers=2))
    tp = sharded_bytes(m, 1, 0, 1, tp=2)
    ep = sharded_bytes(replace(m, moe=replace(m.moe, expert_parallel=True)), 1, 0, 1, tp=2)
    assert ep - tp == pytest.approx(2 * 3 * 4 * 10 * 2 * (1.375 - 1.0))  # layers · expert weights · bytes


@pytest.mark.parametrize(
    "args, match",
    [
        (["--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--tp", "2"], "has no routed experts"),
        (["--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b"], "expected --tp of 2 or more GPUs"),
        (["--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--tp", "3"], "dividing the 128 experts"),
    ],
)
def test_expert_parallel_needs_experts_to_spread(args, match, capsys):
    from specsim.cli.main import main

    assert main(["hardware", *args, "--alpha", "0.7", "--expert-parallel"]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err
