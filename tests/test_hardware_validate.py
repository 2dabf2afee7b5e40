"""Honest leave-one-source-out, the pass table (a second implementation of forward_ms), ratio rows, sweeps."""

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim.errors import SpecsimError
from specsim.hardware.batch_limit import paying_range
from specsim.hardware.device import load_device
from specsim.hardware.model import spec_from_config
from specsim.hardware.passes import pass_table, pass_terms
from specsim.hardware.roofline import forward_ms
from specsim.hardware.runtime import RUNTIMES_DIR, Runtime, load_runtime
from specsim.validation.batch_sweeps import published_sweeps
from specsim.validation.published_set import (
    PublishedSet,
    Source,
    is_reserved,
    load_published_set,
    parse_published_set,
)
from specsim.validation.row_predict import predict_row, row_model
from specsim.validation.runtime_fit import (
    fit_all,
    in_sample,
    leave_one_source_out,
    load_runtimes,
    usable_rows,
)
from specsim.validation.sources import is_eagle_paper, is_reserved_row

L70 = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
}


@pytest.fixture(scope="module")
def ps():
    return load_published_set()


def _one_row_set(**row) -> dict:
    """A published-set document of one source and one row: a 1-GPU float16 decode-style row plus ``row``."""
    base = {
        "id": "a",
        "source": "s",
        "where": "w",
        "target": "preset:llava-1.5-7b",
        "device": "l4",
        "runtime": "vllm",
        "batch": 1,
        "weights_dtype": "float16",
        "kv_dtype": "float16",
        "gpus": 1,
        "target_context_tokens": 10,
    }
    return {
        "schema_version": 1,
        "rows": [{**base, **row}],
        "sources": {"s": {"title": "t", "authors": "a", "year": 2024, "venue": "v", "where": "w"}},
    }


def test_pass_table_equals_forward_ms():
    """Vectorised pricing == roofline.forward_ms over dtypes, tp, rows, contexts and runtime parameters."""
    rng = np.random.default_rng(0)
    dev = load_device("a100-80gb-sxm")
    cases = [
        (spec_from_config(L70, "70b", dtype=dt), b, ctx, n, tp)
        for dt in ("bfloat16", "int8", "int4-g32")
        for b, ctx, n, tp in ((1, 0, 1, 1), (4, 8000, 5, 8), (64, 300, 1, 2), (2, 100, 3, 16), (1, 50, 6, 1))
    ]
    table = pass_table([pass_terms(m, dev, b, ctx, n, tp) for m, b, ctx, n, tp in cases])
    for _ in range(8):
        rt = Runtime(
            name="r",
            overhead_ms_per_forward=rng.uniform(0, 2),
            overhead_ms_per_layer=rng.uniform(0, 0.5),
            overhead_ms_per_allreduce=rng.uniform(0, 0.05),
            memory_efficiency_gemv=rng.uniform(0.2, 1),
            memory_efficiency_gemm=rng.uniform(0.2, 1),
            compute_efficiency=rng.uniform(0.1, 1),
            compute_rows_half=rng.uniform(0, 16),
            attention_score_bytes=rng.uniform(0, 16),
            overlap=rng.uniform(0, 1),
            dequant_ms_per_layer=rng.uniform(0, 0.1),
            gemv_max_rows=rng.choice([1.0, 8.0]),
            gemv_int32_ops_per_weight_per_row=rng.uniform(0, 3),
            host_overlap=rng.choice([0.0, rng.uniform(0, 1), 1.0]),
            overhead_ms_per_mask=rng.uniform(0, 2),
            device_ms_per_layer=rng.uniform(0, 0.2),
            kv_concat_int32_ops_per_element=rng.choice([0.0, rng.uniform(0, 300)]),
        )
        ref = [forward_ms(m, dev, rt, b, ctx, n, tp=tp) for m, b, ctx, n, tp in cases]
        assert table.ms(rt) == pytest.approx(ref, rel=1e-12)


def test_row_model_equals_reference_rows(ps):
    for name, rt in load_runtimes(ps).items():
        rows = [r for r in usable_rows(ps) if r.runtime == name]
        assert row_model(ps, rows).predict(rt) == pytest.approx(
            [predict_row(ps, r, rt) for r in rows], rel=1e-12
        )


def test_held_out_source_never_shapes_its_own_prediction(ps):
    """Scaling a source's published numbers changes none of its leave-one-source-out predictions (it does
    change an in-sample fit): the held-out source is never fitted on."""
    runtimes = load_runtimes(ps)
    base = {r.id: r for r in leave_one_source_out(ps, runtimes)}
    for key in ("gpt-fast", "vllm-20780"):
        rows = tuple(
            replace(
                r,
                speedup=r.speedup and r.speedup * 1.3,
                target_ms_per_token=r.target_ms_per_token and r.target_ms_per_token * 1.3,
            )
            if r.source == key
            else r
            for r in ps.rows
        )
        moved = PublishedSet(ps.sources, ps.models, rows)
        for r in leave_one_source_out(moved, runtimes):
            if r.source == key:
                assert r.predicted == pytest.approx(base[r.id].predicted, rel=1e-9)
        shifted = {r.id: r.predicted for r in in_sample(moved, fit_all(moved, runtimes, "x"))}
        assert any(abs(shifted[i] / base[i].predicted - 1) > 0.01 for i in base if base[i].source == key)


def test_runtime_no_other_source_covers_is_priced_at_its_defaults(ps):
    runtimes = load_runtimes(ps)
    results = {r.id: r for r in leave_one_source_out(ps, runtimes)}
    ibed = [r for r in results.values() if r.source == "ibed"]
    assert ibed and all(r.at_defaults for r in ibed)
    row = next(r for r in ps.rows if r.id == ibed[0].id)
    assert ibed[0].predicted == pytest.approx(predict_row(ps, row, runtimes["hf-eager"].at_defaults()))
    assert not any(r.at_defaults for r in results.values() if r.runtime in ("vllm", "gpt-fast", "llama.cpp"))


def test_a_given_family_base_prices_its_members_leave_one_source_out(ps):
    """A --runtime that replaces vLLM reaches the rows of SGLang, vLLM V0 and TensorRT-LLM, which are priced
    by vLLM's family fit on the other sources (they were priced with the shipped vLLM whatever was given)."""
    runtimes = load_runtimes(ps)
    vllm = runtimes["vllm"]
    slower = replace(vllm, defaults={**vllm.defaults, "overhead_ms_per_block": 3.0})
    shipped = {r.id: r.predicted for r in leave_one_source_out(ps, runtimes)}
    given = {r.id: r.predicted for r in leave_one_source_out(ps, {**runtimes, "vllm": slower})}
    for name in ("sglang", "vllm-v0", "tensorrt-llm"):
        ids = [r.id for r in usable_rows(ps) if r.runtime == name]
        assert ids and any(abs(given[i] / shipped[i] - 1) > 1e-3 for i in ids), name


def test_fit_parameters_need_cited_defaults(tmp_path):
    d = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    d["overhead_ms_per_forward"].pop("default")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecsimError, match="overhead_ms_per_forward.default: missing"):
        load_runtime(str(path))


def test_ratio_rows_and_their_reference(ps):
    ratio = [r for r in ps.rows if r.observable == "speedup_ratio" and r.source == "magicdec"]
    assert len(ratio) == 3 and all(r.tau is None and r.batch == 64 for r in ratio)
    # the EAGLE-3 paper's batch tables: batch > 2 rows as ratios to its batch-2 rows, tau derived (stated)
    eagle3 = [r for r in ps.rows if r.observable == "speedup_ratio" and r.source == "eagle3-paper"]
    assert len(eagle3) == 30 and all(r.tau is not None and r.batch > 2 for r in eagle3)
    ref = next(r for r in ps.rows if r.id == ratio[0].ratio_to)
    assert ratio[0].measured == pytest.approx(ratio[0].speedup / ref.speedup)
    data = _one_row_set(kind="decode", target_ms_per_token=9.0, ratio_to="zzz")
    with pytest.raises(SpecsimError, match=r"rows\[0\].ratio_to: expected the id of another row"):
        parse_published_set(data, "mine.json")


def test_vllm_16937_rows_are_the_comments_figures_with_20780s_tau(ps):
    """vLLM PR #16937's H100 BS1 rows: each speedup is the comment's tokens/s over vanilla's 133, each
    EAGLE-1 tau the same head's AL at the same K in issue #20780's table (derived, flagged), and the EAGLE-3
    row, whose runs printed no AL, is not predictable."""
    rows = {r.id: r for r in ps.rows if r.source == "vllm-16937"}
    al_20780 = {r.gamma: r.tau for r in ps.rows if r.source == "vllm-20780" and r.draft_kind == "eagle"}
    for k, tokens_per_s in ((2, 201.69), (4, 198.0), (7, 169.92)):
        r = rows[f"vllm-16937-e1-k{k}"]
        assert r.speedup == pytest.approx(tokens_per_s / 133, abs=1e-4) and r.batch == 1
        assert r.tau == al_20780[k] and r.tau_derivation and "#20780" in r.tau_derivation
    assert rows["vllm-16937-vanilla"].target_ms_per_token == pytest.approx(1000 / 133, abs=1e-3)
    assert rows["vllm-16937-e3-k2"].observable is None


def test_row_without_tau_must_say_why():
    sd = {
        "kind": "sd",
        "draft": "preset:llava-1.5-7b",
        "draft_weights_dtype": "float16",
        "gamma": 3,
        "speedup": 1.5,
    }
    with pytest.raises(
        SpecsimError, match=r"rows\[0\].tau_derivation: missing \(a row without tau must say why"
    ):
        parse_published_set(_one_row_set(**sd), "mine.json")
    data = _one_row_set(**sd, tau_derivation="the source gives no acceptance figure")
    (parsed,) = parse_published_set(data, "mine.json").rows
    assert parsed.observable is None


def test_a_speedup_above_its_own_tau_is_refused():
    """validate --data took a 50x speedup at tau 2.24 and scored it at -97.8 % in the statistics."""
    sd = {"kind": "sd", "draft": "preset:llava-1.5-7b", "draft_weights_dtype": "float16", "gamma": 3}
    sd |= {"tau": 2.5, "tau_definition": "bonus included"}
    with pytest.raises(SpecsimError, match=r"rows\[0\].speedup: expected at most tau = 2.5 .*got 3"):
        parse_published_set(_one_row_set(**sd, speedup=3.0), "mine.json")
    assert parse_published_set(_one_row_set(**sd, speedup=2.4), "mine.json").rows[0].speedup == 2.4


@pytest.mark.parametrize(
    "over, said",
    [
        ({"speeedup": 1.2}, r"rows\[0\]: unknown field 'speeedup'"),  # a typo was dropped without a word
        ({"device": "tpu-v9"}, r"rows\[0\].device: unknown device 'tpu-v9'"),  # named no row
        ({"runtime": "fastllm"}, r"rows\[0\].runtime: unknown runtime 'fastllm'"),
        ({"target": "preset:nope-7b"}, r"rows\[0\].target: unknown model 'nope-7b'"),
    ],
)
def test_a_rows_unknown_key_or_name_is_refused_where_the_row_is_named(over, said):
    decode = {"kind": "decode", "target_ms_per_token": 9.0}
    with pytest.raises(SpecsimError, match=said):
        parse_published_set(_one_row_set(**decode | over), "mine.json")
    assert parse_published_set(_one_row_set(**decode, context_derivation="words"), "mine.json").rows


def test_reserved_sources_by_title_or_venue():
    eagle = Source(
        "eagle2",
        "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees",
        "Li et al.",
        2024,
        "EMNLP",
        "Table 1",
    )
    board = Source("x", "Leaderboard", "Xia et al.", 2024, "https://github.com/hemingkx/Spec-Bench", "SpS")
    vllm_issue = Source("v", "[Bug]: Eagle 3 vs Eagle 1 in vLLM", "someone", 2025, "vllm issue", "table")
    assert is_reserved(board) and not is_reserved(vllm_issue)
    # an EAGLE paper is not reserved whole: only its SpS (separate draft model) rows are
    assert not is_reserved(eagle) and is_eagle_paper(eagle) and not is_eagle_paper(vllm_issue)
    assert is_reserved_row(eagle, "model") and not is_reserved_row(eagle, "eagle3")
    assert is_reserved_row(board, "eagle3") and not is_reserved_row(vllm_issue, "model")


def test_eagle3_paper_loads_its_head_rows_and_refuses_its_sps_rows():
    """The EAGLE-3 paper's SGLang/vLLM batch tables (EAGLE heads) may be used; its SpS rows stay reserved."""
    src = {
        "title": "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test",
        "authors": "Li, Wei, Zhang, Zhang",
        "year": 2025,
        "venue": "NeurIPS 2025; arXiv 2503.01840",
        "where": "Table 3",
    }
    row = {
        "id": "e3",
        "source": "eagle3-paper",
        "kind": "sd",
        "where": "Table 3",
        "target": "llama-3.1-8b",
        "draft": "eagle3-llama3.1-instruct-8b",
        "draft_kind": "eagle3",
        "draft_weights_dtype": "bfloat16",
        "device": "h100-sxm",
        "runtime": "vllm",
        "gpus": 1,
        "batch": 16,
        "weights_dtype": "bfloat16",
        "kv_dtype": "bfloat16",
        "target_context_tokens": 300,
        "gamma": 3,
        "tau": 2.9,
        "tau_definition": "bonus included",
        "speedup": 1.48,
    }
    data = {"schema_version": 1, "sources": {"eagle3-paper": src}, "rows": [row]}
    (parsed,) = parse_published_set(data, "mine.json").rows
    assert parsed.draft_kind == "eagle3"
    sps = dict(row, draft="llama-3.2-1b", draft_kind="model")
    with pytest.raises(SpecsimError, match=r"rows\[0\]: an SpS .* is reserved"):
        parse_published_set(dict(data, rows=[sps]), "mine.json")


def test_published_set_has_batch_and_long_context_rows(ps):
    assert any(r.batch > 1 and r.observable for r in ps.rows)
    assert any(r.target_context_tokens >= 8192 and r.observable for r in ps.rows)
    by_runtime = {}
    for r in ps.rows:
        by_runtime.setdefault(r.runtime, set()).add(r.source)
    assert all(len(by_runtime[n]) >= 2 for n in ("vllm", "gpt-fast", "llama.cpp"))
    assert [len(s) for s in published_sweeps(ps)] == [3, 3, 3, 7, 6, 9, 9, 8, 8]  # 4 EAGLE-3 paper sweeps


def test_paying_range_by_hand():
    b = [1, 2, 4, 8, 16]
    assert paying_range(b, [1.5, 1.2, 0.9, 0.8, 0.7]) == (1, 4)
    assert paying_range(b, [0.8, 0.9, 1.1, 1.3, 1.4]) == (
        4,
        None,
    )  # self-speculation: pays only at large batch
    assert paying_range(b, [0.8] * 5) == (None, None)
    assert paying_range(b, [1.1, 0.9, 1.2, 0.9, 0.8]) == (1, 8)  # stops for good after the last paying batch


def test_pass_rows_price_one_forward_over_their_new_positions(ps):
    """A ``pass`` row (llama-bench ``pp N``) is one target forward over N new positions: ms = 1000·N /
    (t/s)."""
    rows = sorted(
        (r for r in ps.rows if r.kind == "pass" and r.source == "llamacpp-5625"),
        key=lambda r: r.pass_new_tokens,
    )
    assert [r.pass_new_tokens for r in rows] == list(range(1, 12)) and all(
        r.observable == "pass_ms" for r in rows
    )
    tps = float(rows[3].where.rsplit(": ", 1)[1].split()[0])
    assert rows[3].measured == pytest.approx(1000.0 * 4 / tps, rel=1e-4)
    rt = load_runtime("llama.cpp")
    target = ps.model(rows[0].target, rows[0].weights_dtype, rows[0].kv_dtype)
    dev = load_device(rows[0].device)
    predicted = [predict_row(ps, r, rt) for r in rows]
    assert predicted == pytest.approx(
        [float(forward_ms(target, dev, rt, 1, 0, n)) for n in range(1, 12)], rel=1e-12
    )
    assert predicted[1] > predicted[0] and np.all(np.diff(predicted) >= 0)
    # past mul_mat_vec_q's 8 rows, mul_mat_q tiles: the table's 9 rows cost 2.25x its 8 (112.0 / 49.7 ms)
    assert rows[8].measured / rows[7].measured == pytest.approx(2.25, abs=0.01)
    assert predicted[8] / predicted[7] == pytest.approx(2.25, rel=0.1)
    row = {
        "id": "p",
        "kind": "pass",
        "runtime": "llama.cpp",
        "weights_dtype": "q8_0",
        "target_context_tokens": 0,
        "pass_new_tokens": 4,
    }
    with pytest.raises(SpecsimError, match=r"rows\[0\].pass_ms: missing"):
        parse_published_set(_one_row_set(**row), "mine.json")
    with pytest.raises(SpecsimError, match=r"rows\[0\].pass_new_tokens: expected an integer >= 1"):
        parse_published_set(_one_row_set(**{**row, "pass_ms": 30.0, "pass_new_tokens": 0}), "mine.json")


def test_sept_2023_llamacpp_row_is_priced_as_the_row_split_of_its_date(ps):
    """llama.cpp split weight matrices by rows over all GPUs until PR #4766 (Jan 2024) added the layer split:
    the Sept 2023 row (PR #3006, 2x RTX 3090) reads half of each matrix of target and draft on each GPU."""
    row = next(r for r in ps.rows if r.id == "llamacpp-3006-sd")
    assert (row.gpus, row.parallel, row.tp, row.draft_tp) == (2, "tensor", 2, 2)
    assert any("PR #4766" in f for f in row.flags)
    assert not any("layer split over 2 GPUs" in f for f in row.flags)


def test_layer_split_rows_are_priced_at_one_gpus_time(ps):
    """XiongjieDai's llama.cpp rows on 1-6 RTX 3090s ran llama.cpp's default layer split: every GPU count of
    the same model and context gets the same prediction, and the published figures agree (within 15 % across
    GPU counts, where a tensor split would have divided the time by the GPU count)."""
    rows = [r for r in ps.rows if r.source == "xiongjiedai-llama3"]
    assert {r.gpus for r in rows} == {1, 2, 4, 6} and all(r.tp == 1 for r in rows)
    assert all(r.split == "layer" for r in rows if r.gpus > 1)
    rt = load_runtime("llama.cpp")
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r.target, r.weights_dtype, r.target_context_tokens), []).append(r)
    assert sum(len(g) > 1 for g in groups.values()) == 6
    for group in groups.values():
        assert len({predict_row(ps, r, rt) for r in group}) == 1
        published = [r.target_ms_per_token for r in group]
        assert max(published) / min(published) < 1.15
