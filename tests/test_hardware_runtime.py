"""Runtimes, tensor parallel, the published set and `specsim validate`; hand-computed oracles."""

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware.device import CATALOG_DIR, load_device
from specsim.hardware.efficiency_fit import points_from_grid, points_from_latency
from specsim.hardware.model import spec_from_config
from specsim.hardware.parallel import allreduce_link_bytes, allreduce_ms, per_gpu_resident_bytes
from specsim.hardware.plan import Parallel, plan_hardware
from specsim.hardware.roofline import decode_ms, forward_bytes, kv_pass_bytes, sharded_bytes, verify_ms
from specsim.hardware.runtime import RUNTIMES_DIR, Runtime, load_runtime, runtime_names
from specsim.predict.acceptance_source import MethodTau
from specsim.profile_format import Curve, LatencySection
from specsim.validation.published_set import is_reserved, load_published_set, parse_published_set

LLAMA2_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}


def test_every_runtime_parameter_has_a_source():
    assert {"hf-eager", "vllm", "llama.cpp", "gpt-fast", "torch-cpu"} <= set(runtime_names())
    for name in runtime_names():
        data = json.loads((RUNTIMES_DIR / f"{name}.json").read_text())
        rt = load_runtime(name)
        for key in (
            "overhead_ms_per_forward",
            "overhead_ms_per_layer",
            "memory_efficiency_gemv",
            "memory_efficiency_gemm",
            "compute_efficiency",
            "attention_score_bytes",
        ):
            assert data[key]["source"].strip(), (name, key)
        fitted = [k for k in rt.fit if not rt.sources[k].startswith("fitted")]
        assert not fitted, f"{name}: parameters in 'fit' must carry the fit command: {fitted}"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda d: d["overhead_ms_per_forward"].update(value=-1),
            "overhead_ms_per_forward: expected a number",
        ),
        (lambda d: d["memory_efficiency_gemv"].pop("source"), "memory_efficiency_gemv.source"),
        (lambda d: d.update(fit=["speed"]), "fit: expected a list"),
        (lambda d: d.update(kind="tpu"), "kind: expected 'gpu' or 'cpu'"),
        (lambda d: d.update(turbo=True), "unknown field 'turbo'"),
        (lambda d: d.update(split_mode={"value": "row", "source": "x"}), "split_mode.value: expected one of"),
        (lambda d: d.update(split_mode={"value": "layer"}), "split_mode.source"),
        (
            lambda d: d.update(extra_draft_forwards_per_block={"value": -1, "source": "x"}),
            "extra_draft_forwards_per_block: expected a number in",
        ),
        (
            lambda d: d.update(gemv_int32_ops_per_weight_per_row={"value": 99, "source": "x"}),
            "gemv_int32_ops_per_weight_per_row: expected a number in",
        ),
        (
            lambda d: d.update(schema_version=1),
            "schema_version: expected 2, got 1 .*replaced gemv_time_fraction_per_row",
        ),
    ],
)
def test_bad_runtime_files_one_line(tmp_path, capsys, mutate, message):
    d = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    mutate(d)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecsimError, match=message):
        load_runtime(str(path))
    assert main(["hardware", "--runtime", str(path), "--device", "h100-sxm", "--batch", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: runtime file mine.json") and err.count("\n") == 1


@pytest.mark.parametrize(
    "same_as, message",
    [
        ("speed", "memory_efficiency_gemm.same_as: expected another parameter"),
        ("memory_efficiency_gemm", "memory_efficiency_gemm.same_as: expected another parameter"),
        (3, "memory_efficiency_gemm.same_as: expected another parameter"),
    ],
)
def test_bad_tie_is_one_line(tmp_path, same_as, message):
    d = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    d["memory_efficiency_gemm"]["same_as"] = same_as
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecsimError, match=message):
        load_runtime(str(path))


def test_tied_efficiency_follows_its_parameter_through_fits_and_files(tmp_path):
    """vLLM's GEMM efficiency is tied to its GEMV one: a fit, a copy at the defaults and a file round trip all
    keep them equal, so a 1-row and a 2-row pass stream the weights alike."""
    rt = load_runtime("vllm")
    assert rt.ties == {"memory_efficiency_gemm": "memory_efficiency_gemv"}
    moved = rt.with_values("test", memory_efficiency_gemv=0.5)
    assert moved.memory_efficiency_gemm == 0.5 and list(moved.memory_efficiency([1, 2, 64])) == [0.5] * 3
    assert rt.at_defaults().memory_efficiency_gemm == rt.defaults["memory_efficiency_gemv"]
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(moved.to_json()))
    again = load_runtime(str(path))
    assert again.ties == rt.ties and again.memory_efficiency_gemm == 0.5
    # A fitted parameter cannot also be tied.
    with pytest.raises(SpecsimError, match="same_as"):
        Runtime(
            name="t",
            fit=("memory_efficiency_gemm",),
            ties={"memory_efficiency_gemm": "memory_efficiency_gemv"},
        )


def test_row_dependent_efficiency_gemv_vs_gemm():
    """At 1 row the GEMV efficiency prices the weights; from 2 rows the GEMM one (weights dominate here)."""
    m = spec_from_config(LLAMA2_7B, "7b")
    dev = load_device("a100-80gb-sxm")
    rt = Runtime(name="t", memory_efficiency_gemv=0.8, memory_efficiency_gemm=0.4)
    tp, tv1 = decode_ms(m, dev, rt, 0), verify_ms(m, dev, rt, 1, 0)
    assert tp == pytest.approx(forward_bytes(m, 1, 0, 1) / (dev.memory_bandwidth_bytes_per_s * 0.8) * 1e3)
    assert tv1 / tp == pytest.approx(2.0, rel=0.02)
    summed = Runtime(name="s", overlap=0.0, compute_efficiency=0.5)
    maxed = Runtime(name="m", overlap=1.0, compute_efficiency=0.5)
    assert verify_ms(m, dev, summed, 7, 0) > verify_ms(m, dev, maxed, 7, 0)


def test_gemv_row_curve_prices_small_passes_by_hand():
    """Up to gemv_max_rows a pass keeps the GEMV kernel's bandwidth and each row past the first adds its
    integer dot products: weights · ops per weight / the device's INT32 rate; above it the GEMM efficiency
    prices it."""
    m = spec_from_config(LLAMA2_7B, "7b")
    dev = load_device("a100-80gb-sxm")
    rt = Runtime(
        name="t",
        memory_efficiency_gemv=0.5,
        memory_efficiency_gemm=0.25,
        gemv_max_rows=4,
        gemv_int32_ops_per_weight_per_row=2.0,
        compute_efficiency=1.0,
    )
    assert rt.memory_efficiency([1, 2, 3, 4, 5]) == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.25])
    bw = dev.memory_bandwidth_bytes_per_s
    # Llama-2-7B streams 32 layers of (4 · 4096² + 3 · 4096 · 11008) weights and a 32000 × 4096 LM head.
    weights = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 32000 * 4096
    row_ms = weights * 2.0 / 19.5e12 * 1e3  # one row's dot products at the A100's INT32 rate
    # 3 rows: bytes / (bw · 0.5) + 2 rows of arithmetic; 5 rows: bytes / (bw · 0.25), no row term (GEMM)
    assert verify_ms(m, dev, rt, 2, 0) == pytest.approx(
        forward_bytes(m, 1, 0, 3) / (bw * 0.5) * 1e3 + 2 * row_ms
    )
    assert verify_ms(m, dev, rt, 4, 0) == pytest.approx(forward_bytes(m, 1, 0, 5) / (bw * 0.25) * 1e3)
    # The defaults (1 row, no arithmetic) keep the GEMV/GEMM split at one row, as before the row curve
    # existed.
    plain = Runtime(name="p", memory_efficiency_gemv=0.5, memory_efficiency_gemm=0.25)
    assert plain.memory_efficiency([1, 2, 8]) == pytest.approx([0.5, 0.25, 0.25])
    with pytest.raises(SpecsimError, match="runtime.gemv_max_rows: expected a number"):
        Runtime(name="bad", gemv_max_rows=0.5)
    # A device file without the INT32 rate cannot price those rows: one line naming the device and the field.
    bare = replace(dev, name="my-gpu", int32_ops_per_s=None)
    assert verify_ms(m, bare, plain, 2, 0) > 0  # a runtime without row arithmetic does not need it
    with pytest.raises(SpecsimError, match="device 'my-gpu': int32_ops_per_s is missing"):
        verify_ms(m, bare, rt, 2, 0)


def test_llama_cpp_plan_needs_the_devices_int32_rate(tmp_path, capsys):
    """llama.cpp prices its 2- to 8-row passes by the CUDA cores' INT32 rate: a device file without it, or
    with a bad one, is a one-line error naming the field."""
    d = json.loads((CATALOG_DIR / "rtx-3090.json").read_text())
    args = [
        "hardware",
        "--target",
        "llama-2-7b",
        "--draft",
        "llama-2-7b",
        "--alpha",
        "0.7",
        "--batch",
        "1",
        "--runtime",
        "llama.cpp",
        "--device",
        str(tmp_path / "gpu.json"),
    ]
    (tmp_path / "gpu.json").write_text(json.dumps(d))
    assert main(args) == 0
    capsys.readouterr()
    d.pop("int32_ops_per_s")
    (tmp_path / "gpu.json").write_text(json.dumps(d))
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "int32_ops_per_s is missing" in err and "'rtx-3090'" in err
    d["int32_ops_per_s"] = {"value": -1, "source": "x"}
    (tmp_path / "gpu.json").write_text(json.dumps(d))
    assert main(args) == 2
    assert "int32_ops_per_s.value: expected a finite number > 0, got -1" in capsys.readouterr().err


def test_tensor_parallel_allreduce_bytes_by_hand():
    """Llama-2-70B, TP 8, one token: 2 all-reduces x 80 layers of 8192 bf16 values, ring factor 2*7/8."""
    m = spec_from_config(LLAMA2_70B, "70b")
    message = 8192 * 2
    hand = 2 * 80 * message * 2 * 7 / 8
    assert allreduce_link_bytes(m, 1, 1, 8) == pytest.approx(hand)
    assert allreduce_link_bytes(m, 4, 6, 8) == pytest.approx(hand * 24)
    dev = load_device("h100-sxm")
    rt = Runtime(name="t", interconnect_efficiency=1.0, overhead_ms_per_allreduce=0.0)
    assert allreduce_ms(m, dev, rt, 1, 1, 8) == pytest.approx(hand / 450e9 * 1e3)
    assert allreduce_ms(m, dev, rt, 1, 1, 1) == 0.0
    # 70B bf16 does not fit one 80 GB GPU; over 8 with a whole 7B draft on GPU 0 it does
    draft = spec_from_config(LLAMA2_7B, "7b")
    assert per_gpu_resident_bytes(m, draft, 1, 4096, 1) > 80e9
    assert per_gpu_resident_bytes(m, draft, 1, 4096, 8) == pytest.approx(
        (m.weight_bytes + 4096 * m.kv_bytes_per_token) / 8
        + draft.weight_bytes
        + 4096 * draft.kv_bytes_per_token
    )


def test_tensor_parallel_beyond_the_interconnect_runs_at_the_scale_out_link(tmp_path, capsys):
    """A DGX H100 joins 8 GPUs over NVLink and has one 400 Gb/s InfiniBand adapter per GPU; an RTX 3090's
    bridge joins 2 cards. A ring over more GPUs than that runs at the slower link."""
    m = spec_from_config(LLAMA2_70B, "70b")
    rt = Runtime(name="t", interconnect_efficiency=1.0, overhead_ms_per_allreduce=0.0)
    hand = 2 * 15 / 16 * (8192 * 2) * 160  # bytes through each GPU's link in one 1-token pass over 16 GPUs
    assert allreduce_ms(m, load_device("h100-sxm"), rt, 1, 1, 16) == pytest.approx(hand / 50e9 * 1e3)
    assert allreduce_ms(m, load_device("h100-sxm"), rt, 1, 1, 8) == pytest.approx(
        2 * 7 / 8 * 8192 * 2 * 160 / 450e9 * 1e3
    )
    rtx = load_device("rtx-3090")
    assert (rtx.link_bytes_per_s(2), rtx.link_bytes_per_s(4)) == (56.25e9, 32e9)
    d = json.loads((CATALOG_DIR / "h100-sxm.json").read_text())
    d.pop("scale_out_bandwidth_bytes_per_s")
    (tmp_path / "node.json").write_text(json.dumps(d))
    args = [
        "hardware",
        "--target",
        "llama-2-70b",
        "--draft",
        "llama-2-7b",
        "--alpha",
        "0.7",
        "--batch",
        "1",
        "--device",
        str(tmp_path / "node.json"),
    ]
    assert main(args + ["--tp", "8"]) == 0
    assert main(args + ["--tp", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "scale_out_bandwidth_bytes_per_s" in err and "tp <= 8" in err
    d["interconnect_gpus"]["value"] = 1.5
    (tmp_path / "node.json").write_text(json.dumps(d))
    assert main(args) == 2
    assert "interconnect_gpus.value: expected an integer >= 2, got 1.5" in capsys.readouterr().err


def test_tensor_parallel_shards_whole_heads_and_replicates_kv_heads(capsys):
    """tp must divide the 64 attention heads of Llama-2-70B; past its 8 KV heads each is replicated, so the KV
    cache (in memory and in a pass's traffic) divides by 8, not by tp."""
    m, draft = spec_from_config(LLAMA2_70B, "70b"), spec_from_config(LLAMA2_7B, "7b")
    mt = MethodTau("m", "s", (3,), (2.5,), ("given",))
    h100 = load_device("h100-sxm")
    with pytest.raises(SpecsimError, match="64 attention heads"):
        plan_hardware(m, draft, [h100], [mt], parallel=Parallel(tp=3))
    assert (
        main(
            [
                "hardware",
                "--target",
                "llama-2-70b",
                "--draft",
                "llama-2-7b",
                "--alpha",
                "0.8",
                "--tp",
                "3",
                "--device",
                "h100-sxm",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tensor parallel degree 3" in err and "64 attention heads" in err
    kv_total = 4 * 1000 * m.kv_bytes_per_token  # batch 4, 1000 cached positions
    assert per_gpu_resident_bytes(m, draft, 4, 1000, 16) == pytest.approx(
        m.weight_bytes / 16 + kv_total / 8 + draft.weight_bytes + 1000 * 4 * draft.kv_bytes_per_token
    )
    assert per_gpu_resident_bytes(m, draft, 4, 1000, 8) == pytest.approx(
        m.weight_bytes / 8 + kv_total / 8 + draft.weight_bytes + 1000 * 4 * draft.kv_bytes_per_token
    )
    # one decode pass: everything over 16 GPUs but the KV cache, read over 8
    assert kv_pass_bytes(m, 4, 1000, 1) == pytest.approx(4 * 1001 * m.kv_bytes_per_token)
    assert sharded_bytes(m, 4, 1000, 1, tp=16) == pytest.approx(
        forward_bytes(m, 4, 1000, 1) / 16 + 4 * 1001 * m.kv_bytes_per_token * (1 / 8 - 1 / 16)
    )
    assert sharded_bytes(m, 4, 1000, 1, tp=8) == forward_bytes(m, 4, 1000, 1) / 8
    plan = plan_hardware(m, draft, [h100], [mt], parallel=Parallel(tp=16), batches=(4,), contexts=(1000,))
    assert plan.rows[0].per_gpu_bytes == pytest.approx(per_gpu_resident_bytes(m, draft, 4, 1000 + 4, 16))


def test_70b_7b_tensor_parallel_plan():
    target, draft = spec_from_config(LLAMA2_70B, "70b"), spec_from_config(LLAMA2_7B, "7b")
    mt = MethodTau(
        "m", "s", (1, 2, 3, 4, 5), tuple(float(x) for x in (1.8, 2.4, 2.8, 3.1, 3.3)), ("given",) * 5
    )
    h100 = load_device("h100-sxm")
    rt = load_runtime("vllm")
    one = plan_hardware(target, draft, [h100], [mt], efficiency=rt, batches=(1,), contexts=(1024,))
    eight = plan_hardware(
        target, draft, [h100], [mt], efficiency=rt, batches=(1,), contexts=(1024,), parallel=Parallel(8)
    )
    assert not one.rows[0].fits_memory and eight.rows[0].fits_memory
    assert eight.rows[0].target_ms_per_step < one.rows[0].target_ms_per_step
    assert eight.rows[0].c > one.rows[0].c  # the unsharded draft costs relatively more
    assert any("tensor parallel over 8" in a for a in eight.assumptions)
    with pytest.raises(SpecsimError, match="tensor parallel degree"):
        plan_hardware(target, draft, [h100], [mt], parallel=Parallel(0))


def test_layer_split_divides_memory_not_time(capsys):
    """llama.cpp (pull request #4766) and Accelerate place whole layers per GPU and run them in turn: over N
    GPUs a pass costs what it costs on one, and the most loaded GPU holds ceil(layers / N) of the layers."""
    target, draft = (
        spec_from_config(LLAMA2_70B, "70b", dtype="q4_k_m"),
        spec_from_config(LLAMA2_7B, "7b", dtype="q4_k_m"),
    )
    mt = MethodTau("m", "s", (3,), (2.5,), ("given",))
    rtx = load_device("rtx-3090")
    rt = load_runtime("llama.cpp")
    assert rt.split_mode == "layer" and load_runtime("vllm").split_mode == "tensor"
    plans = {
        n: plan_hardware(
            target,
            draft,
            [rtx],
            [mt],
            efficiency=rt,
            batches=(1,),
            contexts=(512,),
            parallel=Parallel(n, split="layer"),
        ).rows[0]
        for n in (1, 2, 3)
    }
    tensor = plan_hardware(
        target,
        draft,
        [rtx],
        [mt],
        efficiency=rt,
        batches=(1,),
        contexts=(512,),
        parallel=Parallel(2, split="tensor"),
    ).rows[0]
    assert plans[2].target_ms_per_step == plans[1].target_ms_per_step == plans[3].target_ms_per_step
    assert plans[2].speedup == plans[1].speedup
    assert tensor.target_ms_per_step < 0.6 * plans[2].target_ms_per_step
    kv = (512 + 4) * target.kv_bytes_per_token
    assert plans[3].per_gpu_bytes == pytest.approx(
        (target.weight_bytes + kv) * 27 / 80 + draft.weight_bytes + (512 + 4) * draft.kv_bytes_per_token
    )
    assert not plans[1].fits_memory and plans[3].fits_memory
    with pytest.raises(SpecsimError, match="layer split over 81 GPUs: target '70b' has 80 layers"):
        plan_hardware(target, draft, [rtx], [mt], efficiency=rt, parallel=Parallel(81, split="layer"))
    # the CLI takes the runtime's split and says so; --split-mode overrides it, and 3 GPUs need no head
    # divisor
    args = [
        "hardware",
        "--target",
        "llama-2-70b",
        "--draft",
        "llama-2-7b",
        "--dtype",
        "q4_k_m",
        "--alpha",
        "0.7",
        "--device",
        "rtx-3090",
        "--batch",
        "1",
        "--context",
        "512",
        "--json",
    ]
    for extra, line in (
        (["--tp", "3"], "layer split over 3 GPUs"),
        (["--tp", "2", "--split-mode", "tensor"], "tensor parallel over 2 GPUs"),
    ):
        assert main(args + ["--runtime", "llama.cpp"] + extra) == 0
        assert any(a.startswith(line) for a in json.loads(capsys.readouterr().out)["plan"]["assumptions"])
    assert main(args + ["--runtime", "vllm", "--tp", "3"]) == 2
    assert "64 attention heads" in capsys.readouterr().err


def test_points_from_grid_matches_1d_tables():
    lat = LatencySection(target_verify_ms_by_gamma=Curve((1.0, 2.0), (5.0, 6.0)), verify_context_tokens=64)
    pts, _ = points_from_latency(lat)
    grid = points_from_grid("target", "verify", [2, 3], [64], [1], [[[5.0]], [[6.0]]])
    assert [(p.label, p.new_tokens, p.measured_ms, p.gamma) for p in pts] == [
        (p.label, p.new_tokens, p.measured_ms, p.gamma) for p in grid
    ]
    many = points_from_grid("draft", "draft_next", [1], [64, 256], [1, 4], [[[1.0, 2.0], [1.5, None]]])
    assert len(many) == 3 and {p.batch for p in many} == {1, 4}


def test_published_set_is_cited_and_keeps_reserved_sources_out():
    ps = load_published_set()
    assert len(ps.rows) >= 25 and len(ps.sources) >= 5
    assert any(r.multimodal for r in ps.rows) and any(r.tp > 1 for r in ps.rows)
    for key, s in ps.sources.items():
        assert s.title and s.authors and s.year and s.where
        assert not is_reserved(s), key
    derived = [r for r in ps.rows if r.tau_derivation and r.tau is not None]
    assert derived and all(r.flags for r in derived)
    # vLLM issue #20780's AL table is offline inference; its EAGLE-3 TPOTs are online runs that accepted less
    # (vLLM PR #25916): only K=3, whose online AL the PR gives, carries a tau
    e3 = {
        r.gamma: r for r in ps.rows if r.source == "vllm-20780" and r.draft and r.draft.startswith("eagle3")
    }
    assert e3[3].tau == 2.2 and "25916" in e3[3].tau_derivation
    assert all(r.observable is None and "25916" in r.tau_derivation for k, r in e3.items() if k != 3)
    data = json.loads(
        json.dumps(
            {
                "schema_version": 1,
                "sources": {
                    "spec-bench": {"title": "x", "authors": "y", "year": 2024, "venue": "v", "where": "w"}
                },
                "rows": [{}],
            }
        )
    )
    with pytest.raises(SpecsimError, match="sources\\['spec-bench'\\]: 'x' is reserved"):
        parse_published_set(data, "mine.json")


def test_validate_cli_json_plots_and_sweeps(tmp_path, capsys):
    """One leave-one-source-out run through the CLI (JSON + both plots): all rows summarised, sweeps
    present."""
    rc = main(
        ["validate", "--json", "--plot", str(tmp_path / "v.png"), "--sweep-plot", str(tmp_path / "s.png")]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["mode"] == "leave-one-source-out" and out["not_predictable"]
    assert {"error", "textbook_error", "at_defaults"} <= set(out["rows"][0])
    for name in ("v.png", "s.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert out["summary"]["rows"] == len(out["rows"]) >= 40
    assert out["summary"]["median_abs_error"] < out["summary"]["textbook_median_abs_error"]
    assert all(np.isfinite(r["predicted"]) for r in out["rows"])
    assert out["batch_sweeps"] and all(len(s["points"]) >= 2 and s["grid"] for s in out["batch_sweeps"])


def test_hardware_cli_user_tau_fixed_gamma_and_tp(capsys):
    rc = main(
        [
            "hardware",
            "--pair",
            "llava-1.5-7b-68m",
            "--device",
            "a100-80gb-sxm",
            "--batch",
            "1",
            "--context",
            "2048",
            "--gamma",
            "4",
            "--alpha",
            "0.7",
            "--runtime",
            "hf-eager",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and {r["best_gamma"] for r in out["plan"]["rows"]} == {4}
    rc = main(
        [
            "hardware",
            "--pair",
            "llava-1.5-7b-68m",
            "--device",
            "h100-sxm",
            "--batch",
            "1",
            "--tp",
            "2",
            "--tau",
            "3.1",
            "--gamma",
            "5",
            "--dtype",
            "int4",
            "--kv-dtype",
            "float16",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["plan"]["rows"][0]["tp"] == 2 and out["plan"]["rows"][0]["tau"] == 3.1
    assert main(["hardware", "--tau", "3", "--device", "h100-sxm"]) == 2
    assert "--tau: needs --gamma" in capsys.readouterr().err


def test_model_config_without_model_type_is_an_error(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({k: v for k, v in LLAMA2_7B.items() if k != "model_type"}))
    assert main(["hardware", "--model-config", str(cfg), "--draft", str(cfg), "--device", "l4"]) == 2
    err = capsys.readouterr().err
    assert "model_type: missing" in err and err.count("\n") == 1


@pytest.mark.parametrize("model_type", ["whisper", "t5", "bert"])
def test_a_model_config_of_an_encoder_is_an_error(tmp_path, capsys, model_type):
    """A Llama-2 config relabelled 'whisper' was priced as a 6.74B dense decoder."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA2_7B | {"model_type": model_type}))
    assert main(["hardware", "--model-config", str(cfg), "--draft", "llama-2-7b", "--device", "l4"]) == 2
    err = capsys.readouterr().err
    assert f"model_type: '{model_type}' is an encoder or an encoder-decoder" in err and err.count("\n") == 1


def test_hardware_cli_takes_the_published_sets_models_by_name(capsys):
    # the published set ships cited HF configs; they plan by name like presets, and match the hand-written
    # config
    rc = main(
        [
            "hardware",
            "--target",
            "llama-2-70b",
            "--draft",
            "llama-2-7b",
            "--device",
            "h100-sxm",
            "--tp",
            "8",
            "--batch",
            "1",
            "--context",
            "1024",
            "--alpha",
            "0.8",
            "--json",
        ]
    )
    by_name = json.loads(capsys.readouterr().out)["plan"]["rows"][0]
    target, draft = spec_from_config(LLAMA2_70B, "70b"), spec_from_config(LLAMA2_7B, "7b")
    mt = MethodTau(
        "user",
        "cli",
        tuple(range(1, 9)),
        tuple((1 - 0.8 ** (g + 1)) / 0.2 for g in range(1, 9)),
        ("given",) * 8,
    )
    by_hand = plan_hardware(
        target,
        draft,
        [load_device("h100-sxm")],
        [mt],
        efficiency=load_runtime("vllm"),
        batches=(1,),
        contexts=(1024,),
        parallel=Parallel(8),
    ).rows[0]
    assert rc == 0 and by_name["tp"] == 8
    assert by_name["target_ms_per_step"] == pytest.approx(by_hand.target_ms_per_step, rel=1e-9)
    assert main(["hardware", "--target", "llama-2-71b", "--draft", "llama-2-7b", "--device", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'llama-2-71b'" in err and "llama-2-70b" in err and err.count("\n") == 1


def test_named_pair_without_acceptance_warns_that_tau_is_borrowed(capsys):
    """--target/--draft without --alpha/--tau/--profile plan with the default profile's tau: say so, once."""
    args = [
        "hardware",
        "--target",
        "llama-2-70b",
        "--draft",
        "llama-2-7b",
        "--tp",
        "4",
        "--device",
        "h100-sxm",
        "--batch",
        "1",
        "--context",
        "1024",
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert (
        "tau comes from the default profile ibed-llava1.5-7b-68m" in err and "llama-2-70b / llama-2-7b" in err
    )
    assert main(args + ["--alpha", "0.8"]) == 0
    assert "tau comes from" not in capsys.readouterr().err


def test_extra_draft_forwards_cost_one_draft_step_each():
    """A runtime whose drafter runs one forward beyond its γ drafts (llama.cpp's speculative example) adds
    exactly one Tq per block: in the plan (read back through its own c and v) and in a published row."""
    from dataclasses import replace

    from specsim.validation.row_predict import device, models, predict_row, row_model

    dev = load_device("rtx-3090")
    target, draft = (
        spec_from_config(LLAMA2_70B, "t", dtype="q4_k_m"),
        spec_from_config(LLAMA2_7B, "d", dtype="q4_k_m"),
    )
    rt0 = load_runtime("llama.cpp")
    assert load_runtime("llama.cpp-2023").extra_draft_forwards_per_block == 1.0
    assert (
        rt0.extra_draft_forwards_per_block == 0.0 and load_runtime("vllm").extra_draft_forwards_per_block == 0
    )
    mt = MethodTau("x", "s", (3,), (2.5,), ("given",))
    for extra in (0.0, 1.0, 2.5):
        rt = replace(rt0, extra_draft_forwards_per_block=extra)
        row = plan_hardware(
            target,
            draft,
            [dev],
            [mt],
            efficiency=rt,
            batches=(1,),
            contexts=(512,),
            parallel=Parallel(tp=2, split="layer"),
        ).rows[0]
        assert row.speedup == pytest.approx(
            2.5 / ((3 + extra) * row.c + row.v + rt.overhead_ms_per_block / row.target_ms_per_step)
        )
    ps = load_published_set()
    sd = next(r for r in ps.rows if r.id == "llamacpp-5877-sd")
    assert sd.extra_draft_forwards_per_block == 1  # llama-speculative, not llama-server: the row says so
    t, d = models(ps, sd)
    tq = decode_ms(d, device(sd.device), rt0, sd.draft_context_tokens)
    ms = {
        e: predict_row(ps, replace(sd, speedup=None, extra_draft_forwards_per_block=e), rt0)
        for e in (0.0, 1.0)
    }
    assert ms[1.0] - ms[0.0] == pytest.approx(
        tq / sd.tau
    )  # SD ms per token: one more Tq per block of τ tokens
    by_runtime = predict_row(
        ps, replace(sd, extra_draft_forwards_per_block=None), replace(rt0, extra_draft_forwards_per_block=1.0)
    )
    assert by_runtime == pytest.approx(predict_row(ps, sd, rt0))  # the row's figure stands for the runtime's
    rows = [replace(sd, speedup=None), sd, replace(sd, extra_draft_forwards_per_block=None)]
    rt = replace(rt0, extra_draft_forwards_per_block=0.5)
    assert row_model(ps, rows).predict(rt) == pytest.approx([predict_row(ps, r, rt) for r in rows], rel=1e-12)


def test_extra_draft_forwards_in_replayed_and_tree_plans():
    """Replayed chain blocks pay (g + extra)·Tq when they draft and nothing when drafting is off (g = 0); the
    tree planner's best chain pays the same extra Tq per block."""
    from dataclasses import replace

    from specsim.draft_shapes.block_plans import BlockPlan
    from specsim.draft_shapes.tree_replay import TreeMethod
    from specsim.hardware.tree_plan import plan_trees, replay_speedup

    dev = load_device("rtx-3090")
    target, draft = (
        spec_from_config(LLAMA2_7B, "t", dtype="q4_k_m"),
        spec_from_config({**LLAMA2_7B, "num_hidden_layers": 4}, "d", dtype="q4_k_m"),
    )
    rt0 = replace(load_runtime("llama.cpp"), extra_draft_forwards_per_block=0.0)
    rt1 = replace(rt0, extra_draft_forwards_per_block=1.0)
    plan = BlockPlan(
        start=np.array([0, 4, 5]),
        drafts=np.array([3, 0, 2]),
        emitted=np.array([4, 1, 3]),
        first_rows=np.array([1, 0, 1]),
        weight=np.ones(3),
    )
    tp, tq = decode_ms(target, dev, rt0, 512), decode_ms(draft, dev, rt0, 512)
    spent = [
        plan.tokens * tp / replay_speedup(target, draft, dev, rt, [plan], context=512) for rt in (rt0, rt1)
    ]
    assert spent[1] - spent[0] == pytest.approx(2 * tq)  # two drafting blocks, one extra forward each
    acc = np.full((10, 8), 0.0)
    acc[:, 0] = 0.8
    rows = [
        plan_trees(
            target, draft, [dev], [TreeMethod("m", acc)], efficiency=rt, contexts=(512,), n_max=8, gamma_max=4
        )[0]
        for rt in (rt0, rt1)
    ]
    blocks = [r.chain_tau * r.target_ms_per_step / r.chain_speedup for r in rows]
    assert rows[0].chain_gamma == rows[1].chain_gamma and blocks[1] - blocks[0] == pytest.approx(tq)


def test_plan_says_when_the_runtime_drafts_an_extra_forward(capsys):
    argv = [
        "hardware",
        "--target",
        "llama-2-7b",
        "--draft",
        "tinyllama-1.1b",
        "--alpha",
        "0.7",
        "--device",
        "rtx-3090",
        "--batch",
        "1",
        "--context",
        "512",
        "--runtime",
    ]
    assert main(argv + ["llama.cpp-2023"]) == 0
    assert "draft: γ + 1 forwards per block" in capsys.readouterr().out
    assert main(argv + ["vllm"]) == 0
    assert "forwards per block" not in capsys.readouterr().out
