"""Device ranking: speedup identity, best γ, where SD stops paying, costs; ``specsim hardware`` CLI."""

import json

import numpy as np
import pytest

from specsim.acceptance.theory import tau_iid
from specsim.cli.main import main
from specsim.hardware.device import Device, load_device
from specsim.hardware.model import spec_from_config
from specsim.hardware.plan import plan_hardware, ranking, speedup_crossover_batch
from specsim.hardware.roofline import Efficiency, decode_ms, verify_ms
from specsim.predict.acceptance_source import MethodTau
from specsim.presets import preset_names
from specsim.profile_format import MethodAcceptance
from specsim.profiles import save_profile
from tests.conftest import make_profile

QWEN = {
    "model_type": "qwen2",
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
TARGET = spec_from_config(
    {**QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28}, "t"
)
DRAFT = spec_from_config(
    {
        **QWEN,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
    },
    "d",
)
ENTRY = MethodAcceptance(method="M", scenario="s", images_per_prompt=0, gamma=5, tau=3.0)


def test_plan_rows_follow_the_speedup_formula_and_best_gamma():
    h100 = load_device("h100-sxm")
    mt = MethodTau.from_entry(ENTRY)
    assert mt.tau[4] == 3.0 and mt.tau_source[4] == "measured" and mt.tau_source[0].startswith("iid")
    plan = plan_hardware(TARGET, DRAFT, [h100], [mt], batches=(1, 16), contexts=(512,))
    assert len(plan.rows) == 2
    eff = Efficiency()
    for row in plan.rows:
        tp = decode_ms(TARGET, h100, eff, 512, row.batch_size)
        tq = decode_ms(DRAFT, h100, eff, 512, row.batch_size)
        gammas = np.arange(1, 9)
        s = np.array(mt.tau) / (
            gammas * tq / tp + verify_ms(TARGET, h100, eff, gammas, 512, row.batch_size) / tp
        )
        assert row.best_gamma == int(gammas[np.argmax(s)]) and row.speedup == pytest.approx(s.max())
        assert row.sd_tokens_per_s == pytest.approx(row.target_tokens_per_s * row.speedup)
        assert row.c == pytest.approx(tq / tp)


def test_speedup_stops_paying_at_large_batch_on_gqa_model():
    """GQA keeps the KV cache small, so verification turns compute-bound as the batch grows."""
    alpha = 0.6
    entry = MethodAcceptance(
        method="M", scenario="s", images_per_prompt=0, gamma=5, tau=float(tau_iid(alpha, 5))
    )
    l4 = load_device("l4")
    plan = plan_hardware(
        TARGET, DRAFT, [l4], [MethodTau.from_entry(entry)], batches=(1, 4, 16, 64, 256, 1024), contexts=(256,)
    )
    rows = sorted(plan.select(device="l4"), key=lambda r: r.batch_size)
    assert rows[0].speedup > 1.0 and rows[-1].speedup < 1.0
    crossover = speedup_crossover_batch(plan, "l4", "M", 256)
    assert crossover is not None and all(r.speedup >= 1.0 for r in rows if r.batch_size < crossover)
    assert rows[-1].best_gamma <= rows[0].best_gamma  # compute-bound verification favours short blocks


def test_ranking_order_and_costs():
    cheap = load_device("l4").with_price(1.0)
    devices = [cheap, load_device("h100-sxm"), load_device("a100-80gb-sxm")]
    plan = plan_hardware(
        TARGET, DRAFT, devices, [MethodTau.from_entry(ENTRY)], batches=(1,), contexts=(1024,)
    )
    order = [r.device for r in ranking(plan, "M")]
    assert order == ["h100-sxm", "a100-80gb-sxm", "l4"]
    row = plan.select(device="l4")[0]
    assert row.usd_per_million_tokens == pytest.approx(1.0 / (row.sd_tokens_per_s * 3600) * 1e6)
    assert plan.select(device="a100-80gb-sxm")[0].usd_per_million_tokens is None  # the catalog cites none
    data = json.loads(json.dumps(plan.to_json()))
    assert data["ranking"]["M"][0] == "h100-sxm"


def test_ensemble_draft_batch_costs_more():
    h100 = load_device("h100-sxm")
    single = MethodTau.from_entry(ENTRY)
    ensemble = MethodTau.from_entry(
        MethodAcceptance(method="MT", scenario="s", images_per_prompt=0, gamma=5, tau=3.0, draft_batch_size=4)
    )
    plan = plan_hardware(TARGET, DRAFT, [h100], [single, ensemble], batches=(32,), contexts=(1024,))
    assert plan.select(method="MT")[0].c > plan.select(method="M")[0].c


# --------------------------------------------------------------------------- CLI
def _profile_path(tmp_path):
    path = tmp_path / "p.json"
    save_profile(make_profile(), path)
    return str(path)


def _run(capsys, *argv):
    rc = main(["hardware", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


CFG_ARGS = ("--device", "h100-sxm", "--device", "l4", "--batch", "1,8", "--context", "1024")


def _config_files(tmp_path):
    t, d = tmp_path / "t.json", tmp_path / "d.json"
    t.write_text(
        json.dumps({**QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28})
    )
    d.write_text(
        json.dumps(
            {
                **QWEN,
                "hidden_size": 896,
                "intermediate_size": 4864,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
            }
        )
    )
    return str(t), str(d)


def test_cli_text_json_and_plot(tmp_path, capsys):
    t, d = _config_files(tmp_path)
    prof = _profile_path(tmp_path)
    rc, out, err = _run(capsys, "--target", t, "--draft", d, "--profile", prof, *CFG_ARGS)
    assert rc == 0, err
    assert (
        "ranking at batch 1, context 1024" in out and "assumptions:" in out and "i.i.d. extrapolation" in out
    )
    assert out.index("h100-sxm") < out.index(" l4 ")
    rc, out, err = _run(
        capsys,
        "--target",
        t,
        "--draft",
        d,
        "--profile",
        prof,
        "--method",
        "all",
        "--json",
        "--plot",
        str(tmp_path / "s.png"),
        *CFG_ARGS,
    )
    assert rc == 0, err
    data = json.loads(out)
    assert data["plan"]["methods"] == ["M", "MT"] and len(data["plan"]["rows"]) == 2 * 2 * 2
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_fit_profile_and_validate(tmp_path, capsys):
    t, d = _config_files(tmp_path)
    prof = _profile_path(tmp_path)
    rc, out, err = _run(
        capsys,
        "--target",
        t,
        "--draft",
        d,
        "--profile",
        prof,
        "--fit-profile",
        prof,
        "--fit-device",
        "l4",
        "--validate",
        *CFG_ARGS,
    )
    assert rc == 0, err
    assert "fitted: compute" in out and "held-out: rms" in out and "target decode ctx=1024" in out
    rc, out, err = _run(
        capsys, "--target", t, "--draft", d, "--profile", prof, "--fit-profile", prof, *CFG_ARGS
    )
    assert rc == 2 and "--fit-device" in err  # provenance device 'test' is not a catalog name


def test_cli_fit_profile_takes_the_profiles_models(capsys):
    """--fit-profile without --pair prices the models the profile was measured with, not the default
    pair's."""
    common = (
        "--fit-profile",
        "qwen2.5-coder-0.5b-1.5b-cpu",
        "--profile",
        "qwen2.5-coder-0.5b-1.5b-cpu-check",
        "--validate",
        "--device",
        "l4",
        "--batch",
        "1",
        "--context",
        "1024",
        "--json",
    )
    rc, out, err = _run(capsys, *common)
    assert rc == 0, err
    implicit = json.loads(out)
    rc, out, err = _run(capsys, "--pair", "qwen2.5-coder-0.5b-1.5b", *common)
    assert rc == 0, err
    explicit = json.loads(out)
    assert (implicit["target"], implicit["draft"]) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert implicit["fit"]["held_out_rms_rel_error"] == pytest.approx(
        explicit["fit"]["held_out_rms_rel_error"]
    )
    # The zoo's models are presets now (issue 51): its profile names the models the roofline sizes.
    rc, out, err = _run(capsys, "--fit-profile", "zoo-cpu", "--validate", "--device", "l4", "--json")
    assert rc == 0, err
    assert (json.loads(out)["target"], json.loads(out)["draft"]) == ("zoo:target", "zoo:draft")
    # The pair's own profile has latency only: say which option gives tau.
    rc, out, err = _run(capsys, "--fit-profile", "qwen2.5-coder-0.5b-1.5b-cpu", "--device", "l4")
    assert rc == 2 and "no acceptance entries: pass --profile" in err and "--alpha A" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--device", "tpu-v9"), "unknown device 'tpu-v9'"),
        (("--batch", "0"), "--batch"),
        (("--pair", "nope"), "unknown pair"),
        (("--target", "x.json"), "give both"),
        (("--method", "ZZ"), "unknown method 'ZZ'"),
        (("--profile", "missing.json"), "does not exist"),
        (("--context", "lots"), "--context"),
    ],
)
def test_cli_bad_inputs_exit_2_without_traceback(capsys, argv, message):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and message in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_cli_llava_pair_default_profile(capsys):
    rc, out, err = _run(capsys, "--device", "h100-sxm", "--device", "a10g", "--batch", "1,64")
    assert rc == 0, err
    assert "llava-1.5-7b" in out and "ibed-llava1.5-7b-68m" in out and "best-γ speedup vs batch size" in out


def test_cli_list_devices(capsys):
    rc, out, _ = _run(capsys, "--list-devices", "--device", "h100-sxm")
    assert rc == 0 and "3350" in out and "datasheet" in out


def test_cli_calibrate_cpu_device(tmp_path, capsys):
    out_path = tmp_path / "cpu.json"
    assert main(["calibrate", "cpu-device", "--out", str(out_path)]) == 0
    dev = load_device(str(out_path))
    assert isinstance(dev, Device) and dev.kind == "cpu" and dev.memory_bandwidth_bytes_per_s > 0


@pytest.mark.parametrize("draft", [["--draft-kind", "eagle"], ["--draft", "llama-3.2-1b"]])
def test_the_tree_table_prices_a_chain_as_the_ranking_does(capsys, draft):
    """--trees' best chain equals the plan's best γ where they pick the same γ: one pricing (the tree table
    priced an EAGLE head as a draft model and left out the step terms and the overlap: 1.70x beside 1.82x)."""
    argv = "hardware --trees --alpha 0.7 --target llama-3.1-8b --device h100-sxm --batch 1,8,64".split()
    assert main([*argv, "--context", "1024", *draft, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["batch_size"]: r for r in out["plan"]["rows"]}
    same = [t for t in out["trees"] if t["chain_gamma"] == rows[t["batch_size"]]["best_gamma"]]
    assert len(same) >= 2
    for t in same:
        row = rows[t["batch_size"]]
        assert t["target_ms_per_step"] == pytest.approx(row["target_ms_per_step"], rel=1e-12)
        assert t["chain_speedup"] == pytest.approx(row["speedup"], rel=1e-3)  # the draft's context grows


def test_the_tree_table_compares_the_chain_at_gamma_when_it_is_given(capsys):
    """With --gamma the plan prices that γ; the tree table beside it compared the best chain of γ <= 8
    (chain γ=4 beside a plan at γ 3)."""
    argv = "hardware --trees --alpha 0.7 --target llama-3.1-8b --draft llama-3.2-1b --device h100-sxm".split()
    assert main([*argv, "--batch", "1,8", "--context", "1024", "--gamma", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["batch_size"]: r for r in out["plan"]["rows"]}
    assert {t["chain_gamma"] for t in out["trees"]} == {3} == {r["best_gamma"] for r in rows.values()}
    for t in out["trees"]:
        assert t["chain_speedup"] == pytest.approx(rows[t["batch_size"]]["speedup"], rel=1e-3)
    assert main([*argv, "--batch", "1", "--context", "1024", "--gamma", "3"]) == 0
    assert "n nodes / depth (chain at --gamma 3)" in capsys.readouterr().out


@pytest.mark.parametrize("n_max", [1, 3])
def test_the_best_tree_keeps_within_tree_max_nodes(capsys, n_max):
    """The chains compared beside the trees (γ up to --gamma-max) were candidates for the best tree too: a
    bound of 1 to 3 nodes printed a 5-node chain as the best tree."""
    argv = "hardware --device h200 --batch 1,8 --context 1024 --alpha 0.7 --trees --json".split()
    assert main([*argv, "--tree-max-nodes", str(n_max)]) == 0
    trees = json.loads(capsys.readouterr().out)["trees"]
    assert trees and all(t["nodes"] <= n_max for t in trees)
    assert any(t["chain_gamma"] > n_max for t in trees)  # the chain beside it is not bound


def test_the_best_tree_verifies_within_the_window(capsys):
    """A tree's verify pass writes n + 1 positions after the context, as a chain's writes γ + 1: at context
    4092 of LLaVA-1.5's 4096 a 64-node tree was picked (4157 positions)."""
    argv = (
        "hardware --device h100-sxm --batch 1,64 --context 1024,4092 --alpha 0.8 --gamma-max 3 --trees --json"
    )
    assert main(argv.split()) == 0
    trees = json.loads(capsys.readouterr().out)["trees"]
    assert {t["context_tokens"] for t in trees} == {1024, 4092}
    assert all(t["context_tokens"] + t["nodes"] + 1 <= 4096 for t in trees)
    assert max(t["nodes"] for t in trees if t["context_tokens"] == 1024) > 3  # room there: the search is free


def test_tree_max_nodes_is_bounded_where_the_search_is(capsys):
    """--tree-max-nodes took 1..1024 and the search 1..512: 513 to 1024 failed as 'n_max: ... got 584'."""
    argv = "hardware --device h100-sxm --batch 1 --context 1024 --alpha 0.7 --trees --tree-max-nodes".split()
    assert main([*argv, "600"]) == 2
    err = capsys.readouterr().err
    assert "argument --tree-max-nodes: expected an integer in 1..512" in err and "n_max" not in err
    assert main([*argv, "512", "--json"]) == 0
    assert all(t["nodes"] <= 512 for t in json.loads(capsys.readouterr().out)["trees"])


def test_the_end_to_end_speedup_of_a_one_token_request_is_below_one(capsys):
    """The prefill emits a request's first token: SD decodes the other N - 1 (it priced N/τ blocks, so a
    1-token request gained 1.11x from a fraction of a block)."""
    argv = "hardware --device h200 --batch 1,8 --alpha 0.7 --prompt-tokens 500 --json".split()
    e2e = {}
    for n in (1, 2, 3500):  # 500 + 3500 within llava-1.5-7b's 4096 positions
        assert main([*argv, "--output-tokens", str(n)]) == 0
        e2e[n] = [
            (r["e2e_speedup"], r["speedup"]) for r in json.loads(capsys.readouterr().out)["plan"]["rows"]
        ]
    assert all(x < 1.0 for x, _ in e2e[1])  # both prefills, no decoding: the draft's prefill is all SD adds
    assert all(x < s for x, s in e2e[2]) and all(0.9 * s < x < s for x, s in e2e[3500])


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--list", "--device", "h200"], "--device: shapes a plan, and --list only lists"),
        (["--list", "--plot", "x.png"], "--plot: shapes a plan, and --list only lists"),
        (["--list-devices", "--gamma", "3"], "--gamma: shapes a plan, and --list-devices only lists"),
        (["--list-devices", "--pair", "zoo"], "--pair: shapes a plan, and --list-devices only lists"),
        (["--list", "--list-devices"], "--list, --list-devices: two listings; give one"),
    ],
)
def test_a_listing_refuses_the_options_it_does_not_read(capsys, argv, said):
    """The listings printed byte for byte what they print alone, and --plot wrote no PNG, without a word."""
    assert main(["hardware", *argv]) == 2
    assert capsys.readouterr().err == f"specsim: error: {said}\n"
    assert main(["hardware", "--list-devices", "--device", "h200", "--price", "h200=3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "h200"


@pytest.mark.parametrize("place", ["--draft-one-gpu", "--draft-sharded"])
@pytest.mark.parametrize("kind", ["ngram", "suffix"])
def test_placing_a_draft_is_refused_for_a_kind_without_one(capsys, place, kind):
    """A lookup drafts on the host: the placement changed no number, only an assumption line's wording."""
    argv = "hardware --device h200 --batch 1 --context 1024 --alpha 0.7 --target llama-3.1-8b --tp 2".split()
    assert main([*argv, "--draft-kind", kind, place]) == 2
    said = f"--draft-sharded/--draft-one-gpu: places a draft model, and kind {kind} drafts with none"
    assert capsys.readouterr().err == f"specsim: error: {said}\n"


def test_the_validation_lines_are_for_the_shipped_runtime_only(capsys, tmp_path):
    """A runtime file named vllm with another bandwidth efficiency priced 1.45x as 1.08x, under the shipped
    vllm's "validated ... median |error| 5.2%"."""
    from specsim.hardware.runtime import RUNTIMES_DIR

    mine = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    mine["memory_efficiency_gemv"]["value"] = 0.5
    (tmp_path / "rt.json").write_text(json.dumps(mine))
    argv = "hardware --device h200 --batch 1 --context 1024 --json".split()
    for runtime, lines in (("vllm", 1), (str(tmp_path / "rt.json"), 0)):
        assert main([*argv, "--runtime", runtime]) == 0
        assert len(json.loads(capsys.readouterr().out)["validation"]) == lines


def test_a_head_s_size_says_how_it_is_counted(capsys):
    """`hardware --list` counts a head's checkpoint (1.27B for EAGLE-3 on Llama-3.1-8B, its own embedding
    included); the plan prices the head as it runs (0.42B): its assumptions say which it prints."""
    argv = "hardware --target llama-3.1-8b --alpha 0.7 --device h100-sxm --batch 1 --context 64".split()
    assert main([*argv, "--draft-kind", "eagle3"]) == 0
    out = capsys.readouterr().out
    assert "(0.42B params" in out and "its params above are the head as it runs, on the target's" in out
    assert main([*argv, "--draft", "llama-3.2-1b"]) == 0
    assert "as it runs" not in capsys.readouterr().out


def test_the_speedup_plot_draws_every_context_and_method(tmp_path, monkeypatch):
    """--plot drew the first context and the first method only, without a word, and read 'best γ' at a
    fixed --gamma."""
    from specsim.hardware import plots

    drawn = {}
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.setdefault("fig", fig))
    argv = ["hardware", "--pair", "llava-1.5-7b-68m", "--method", "all", "--scenario", "ChartQA"]
    argv += ["--gamma", "3", "--device", "h100-sxm", "--device", "l4", "--batch", "1,8"]
    argv += ["--context", "1024,4000"]
    assert main([*argv, "--plot", str(tmp_path / "s.png")]) == 0
    axes = drawn["fig"].axes
    assert [a.get_title().split(" tokens")[0] for a in axes] == ["context 1024", "context 4000"]
    labels = {t.get_text() for t in axes[1].get_legend().get_texts()}
    assert len(labels) > 2 and all(", " in x for x in labels)  # device × method
    assert axes[0].get_ylabel() == "SD speedup (γ 3)"


def test_the_catalog_plot_gives_every_device_its_own_colour(capsys, tmp_path, monkeypatch):
    """18 devices on matplotlib's 10-colour cycle: a100-40gb-sxm and l40s, a10g and rtx-3060 shared one."""
    from specsim.hardware import plots

    drawn = {}
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.setdefault("fig", fig))
    assert main(["hardware", "--alpha", "0.7", "--context", "1024", "--plot", str(tmp_path / "h.png")]) == 0
    lines = [ln for ln in drawn["fig"].axes[0].get_lines() if not ln.get_label().startswith("_")]
    from matplotlib.colors import to_rgba

    colors = {to_rgba(ln.get_color()) for ln in lines}
    assert len(lines) == 18 and len(colors) == 18
