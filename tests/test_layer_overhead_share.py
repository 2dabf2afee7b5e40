"""The per-layer launch overhead is paid where layers are launched from the host (layer_overhead_share)."""

from dataclasses import replace

import numpy as np
import pytest

from specsim.hardware.device import load_device
from specsim.hardware.model import spec_from_config
from specsim.hardware.passes import pass_table, pass_terms
from specsim.hardware.roofline import forward_ms
from specsim.hardware.runtime import Runtime, load_runtime
from specsim.validation.family_fit import fit_family
from specsim.validation.published_set import load_published_set
from specsim.validation.row_predict import predict_row

L8 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def test_share_removes_exactly_the_per_layer_overhead_by_hand():
    """Share 1 adds overhead_ms_per_layer · layers to a pass (0.05 ms × 32 = 1.6 ms); share 0 adds none;
    the pass table (the fits' second implementation) agrees."""
    m, dev = spec_from_config(L8, "8b", dtype="bfloat16"), load_device("h100-sxm")
    paid = Runtime(name="t", overhead_ms_per_forward=0.01, overhead_ms_per_layer=0.05)
    graph = replace(paid, layer_overhead_share=0.0)
    one, none = forward_ms(m, dev, paid, 4, 300, 1), forward_ms(m, dev, graph, 4, 300, 1)
    assert one - none == pytest.approx(0.05 * 32, abs=1e-12)
    table = pass_table([pass_terms(m, dev, 4, 300, 1)])
    assert float(table.ms(graph)[0]) == pytest.approx(none, rel=1e-12)
    assert float(table.ms(paid)[0]) == pytest.approx(one, rel=1e-12)


def test_shipped_runtimes_cite_their_graph_mode():
    """vLLM V1 (piecewise graphs, attention launched per layer) pays it; whole-step graphs do not."""
    assert load_runtime("vllm").layer_overhead_share == 1.0
    for name in ("tensorrt-llm", "sglang", "vllm-v0"):
        rt = load_runtime(name)
        assert rt.layer_overhead_share == 0.0, name
        assert "CUDA graph" in rt.sources["layer_overhead_share"], name
    assert "layer_overhead_share" not in load_runtime("llama.cpp").to_json()  # left out: written only if set
    assert load_runtime("vllm").to_json()["layer_overhead_share"]["value"] == 1.0


def test_family_member_keeps_its_share_through_a_fit():
    """A member priced at the base's fitted values (no rows of its own) keeps its own share: the share is a
    cited switch, never fitted nor copied from vLLM."""
    ps = load_published_set()
    base = load_runtime("vllm")
    members = {n: load_runtime(n) for n in ("tensorrt-llm", "sglang", "vllm-v0")}
    out = fit_family(ps, [], base, members, "t")
    assert out["vllm"].layer_overhead_share == 1.0
    for name in members:
        assert out[name].layer_overhead_share == 0.0
        assert out[name].overhead_ms_per_layer == out["vllm"].overhead_ms_per_layer


def test_published_decode_row_loses_the_per_layer_part():
    """SPEED-Bench's 70B decode step (80 layers, TensorRT-LLM) at share 0 against share 1: exactly
    80 · overhead_ms_per_layer apart."""
    ps = load_published_set()
    row = next(r for r in ps.rows if r.id == "speedbench-t10-l70b-model-tar-1k")
    rt = replace(load_runtime("tensorrt-llm"), overhead_ms_per_layer=0.07)
    got = predict_row(ps, row, rt)
    paid = predict_row(ps, row, replace(rt, layer_overhead_share=1.0))
    assert paid - got == pytest.approx(80 * 0.07, rel=1e-9)
    assert np.isfinite(got)
