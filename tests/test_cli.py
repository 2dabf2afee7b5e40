"""The specsim CLI: outputs on the shipped profile, JSON keys, and one-line errors with exit 2."""

import json
import subprocess
import sys

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.profiles import save_profile


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_table_has_every_method(capsys):
    code, out, _ = run(capsys, "predict", "--gamma", "5")
    assert code == 0
    for method in ("M", "T", "C", "P", "MT", "MC", "MTC", "MTCP", "pool36", "C-BLIP2"):
        assert f"\n  {method} " in out
    assert "scenario ChartQA (1 image)" in out and "scenario VIST (5 images)" in out
    assert "1.71" in out  # Table 1b, M on ChartQA


def test_predict_json_keys(capsys):
    code, out, _ = run(capsys, "predict", "--gamma", "5", "--json", "--method", "M", "--scenario", "5img")
    rows = json.loads(out)
    assert code == 0 and {r["scenario"] for r in rows} == {"PororoSV", "VIST"}
    for key in ("method", "scenario", "gamma", "tau", "speedup", "extrapolated"):
        assert key in rows[0]
    assert rows[0]["speedup"] == pytest.approx(0.91, abs=0.01)


def test_predict_other_gamma_marks_extrapolation(capsys):
    code, out, _ = run(capsys, "predict", "--gamma", "3", "--method", "T", "--scenario", "Spot")
    assert code == 0 and "*" in out and "n/a" in out and "Tv(gamma) unknown" in out


def test_sweep_json(capsys, tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    code, out, _ = run(capsys, "sweep", "--gamma", "1-8", "--profile", str(path), "--json")
    rows = json.loads(out)
    assert code == 0
    assert {"method", "scenario", "best_gamma", "best_speedup", "best_note"} <= set(rows[0])
    # τ is measured at γ = 4 only: no best γ among extrapolations, and the JSON says why
    assert rows[0]["best_gamma"] is None and rows[0]["best_note"].startswith("only gamma = 4")


def test_predict_measured_profile_with_e2e(capsys, tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    code, out, _ = run(capsys, "predict", "--gamma", "4", "--profile", str(path), "--new-tokens", "64")
    assert code == 0 and "e2e speedup" in out and "tok/s" in out


def test_predict_e2e_not_computable_is_na_with_a_note(capsys, tmp_path, profile):
    """Images without a measured vision encoder: n/a in the table, the reason below."""
    from dataclasses import replace

    short = replace(profile.latency, vision_encoder_ms_per_image=None)
    path = save_profile(replace(profile, latency=short), tmp_path / "p.json")
    code, out, err = run(capsys, "predict", "--gamma", "4", "--profile", str(path), "--new-tokens", "64")
    assert code == 0 and not err
    assert "n/a" in out and "note: end-to-end latency not computable: vision_encoder_ms_per_image" in out


def test_profiles_lists_shipped(capsys):
    code, out, _ = run(capsys, "profiles")
    assert code == 0 and "ibed-llava1.5-7b-68m (default)" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["predict", "--gamma", "0"], "--gamma: expected an integer >= 1, got '0'"),
        (["predict", "--gamma", "-2"], "--gamma: expected an integer >= 1, got '-2'"),
        (["predict", "--gamma", "2.5"], "--gamma: expected an integer >= 1, got '2.5'"),
        (["predict", "--gamma", "5", "--method", "Q"], "unknown method 'Q'"),
        (["predict", "--gamma", "5", "--scenario", "Mars"], "unknown scenario 'Mars'"),
        (["predict", "--gamma", "5", "--profile", "nope"], "unknown profile 'nope'"),
        (["sweep", "--gamma", "3-1"], "--gamma: expected integers >= 1"),
        (["predict", "--gamma", "5", "--new-tokens", "0"], "--new-tokens: expected an integer >= 1"),
    ],
)
def test_bad_inputs_exit_2_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_malformed_and_truncated_profile_files(capsys, tmp_path, profile):
    good = save_profile(profile, tmp_path / "p.json").read_text()
    (tmp_path / "t.json").write_text(good[:100])
    code, _, err = run(capsys, "predict", "--gamma", "4", "--profile", str(tmp_path / "t.json"))
    assert code == 2 and "not valid JSON" in err
    data = json.loads(good)
    data["acceptance"][0]["gamma"] = "four"
    (tmp_path / "m.json").write_text(json.dumps(data))
    code, _, err = run(capsys, "predict", "--gamma", "4", "--profile", str(tmp_path / "m.json"))
    assert code == 2 and "acceptance[0].gamma: expected an integer, got 'four'" in err


def test_console_script_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "specsim.cli.main", "predict", "--gamma", "x"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "specsim: error: --gamma: expected an integer >= 1, got 'x'"


def test_latency_only_profile_needs_alpha(capsys, tmp_path, profile):
    from dataclasses import replace

    path = save_profile(replace(profile, acceptance=()), tmp_path / "lat.json")
    code, _, err = run(capsys, "predict", "--gamma", "4", "--profile", str(path))
    assert code == 2 and "no acceptance entries: pass --alpha" in err
    code, out, _ = run(capsys, "predict", "--gamma", "4", "--profile", str(path), "--alpha", "0.5", "--json")
    row = json.loads(out)[0]
    assert code == 0 and row["method"] == "iid(alpha=0.5)"
    assert row["tau"] == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)
    assert row["speedup"] == pytest.approx(row["tau"] / (4 * 0.1 + 1.8))
    code, _, err = run(capsys, "sweep", "--profile", str(path), "--alpha", "1.5")
    assert code == 2 and "--alpha: expected a probability in [0, 1), got '1.5'" in err
    code, _, err = run(capsys, "predict", "--gamma", "4", "--profile", str(path), "--alpha", "1")
    assert code == 2 and "--alpha: expected a probability in [0, 1), got '1'" in err  # as every --alpha


def test_alpha_what_if_survives_a_scenario_filter(capsys):
    """--alpha adds its i.i.d. row whatever --scenario selects (a --scenario dropped it without a word)."""
    for argv in (
        ["predict", "--gamma", "3", "--textbook", "--alpha", "0.6", "--scenario", "ChartQA", "--method", "M"],
        ["sweep", "--profile", "zoo-cpu", "--alpha", "0.8", "--scenario", "zoo-1img", "--method", "M"],
        ["predict", "--gamma", "3", "--textbook", "--alpha", "0.6", "--scenario", "1img"],
    ):
        code, out, _ = run(capsys, *argv, "--json")
        rows = json.loads(out)
        assert code == 0 and {r["method"] for r in rows} >= {f"iid(alpha={argv[argv.index('--alpha') + 1]})"}
        assert any(not r["method"].startswith("iid") for r in rows)  # and the scenario's own rows
    code, _, err = run(capsys, "predict", "--gamma", "3", "--alpha", "0.6", "--scenario", "bogus")
    assert code == 2 and "unknown scenario 'bogus'" in err


def test_an_alpha_what_if_is_exact_at_every_gamma(capsys):
    """--alpha is i.i.d. by definition: its rows were marked extrapolated from gamma = 1, and sweep named no
    best gamma for it ('only gamma = 1 priced from its own evidence')."""
    argv = ["sweep", "--profile", "zoo-cpu", "--alpha", "0.8", "--scenario", "what-if", "--json"]
    code, out, _ = run(capsys, *argv)
    (row,) = json.loads(out)
    assert code == 0 and row["best_gamma"] is not None and not any(row["extrapolated"])
    code, out, _ = run(capsys, "predict", "--profile", "zoo-cpu", "--gamma", "3", "--alpha", "0.7", "--json")
    what_if = next(r for r in json.loads(out) if r["method"] == "iid(alpha=0.7)")
    assert not what_if["extrapolated"] and what_if["tau_source"] == "iid --alpha"


def test_profiles_show_says_what_a_profile_holds(capsys):
    code, out, _ = run(capsys, "profiles", "show", "zoo-cpu")
    assert code == 0
    assert "methods (12):" in out and "latency: measured cost model (gamma <= 4, token-tree grids)" in out
    assert "check rows: 222" in out and "greedy: median |err|" in out
    code, out, _ = run(capsys, "profiles", "show", "ibed-llava1.5-7b-68m", "--json")
    info = json.loads(out)
    assert info["gammas_measured"] == [5] and info["latency"].startswith("published ratio g*c+v = 1.3128")
    code, _, err = run(capsys, "profiles", "show")
    assert code == 2 and "profiles show: the following arguments are required: name" in err


@pytest.mark.parametrize("where", [0, 1, 2])
def test_profiles_show_takes_json_before_or_after_the_name(capsys, where):
    """`profiles show --json NAME` was refused: two optional positionals took `show` and left NAME over."""
    argv = ["profiles", "show", "zoo-cpu"]
    argv.insert(where + 1 if where else 1, "--json")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["name"] == "zoo-cpu"


def test_the_textbook_prices_a_gamma_past_the_verify_grid(capsys):
    """v = 1 reads no Tv: zoo-cpu verifies up to 5 rows (gamma 4), and --textbook at gamma 5 was n/a."""
    argv = [
        "predict",
        "--profile",
        "zoo-cpu",
        "--scenario",
        "zoo-1img",
        "--method",
        "M",
        "--textbook",
        "--json",
    ]
    rows = {}
    for gamma in (4, 5):
        assert main([*argv, "--gamma", str(gamma)]) == 0
        rows[gamma] = json.loads(capsys.readouterr().out)[0]
    row = rows[5]
    assert row["speedup"] == pytest.approx(row["tau"] / (5 * row["c"] + 1.0), rel=1e-12)
    assert row["c"] == rows[4]["c"] and "c walked at gamma 4" in row["note"]


@pytest.mark.parametrize("gamma", ["2", "3"])
def test_a_textbook_row_prints_the_tau_and_drafts_its_speedup_divides(capsys, gamma):
    """On a priced profile the textbook row's τ is i.i.d. from the reference γ and its block γ·c + 1: the
    printed τ, d, c and speedup agree (they once showed the replayed decode τ and d beside the textbook's)."""
    argv = ["predict", "--profile", "zoo-cpu", "--gamma", gamma, "--scenario", "zoo-1img", "--method", "M"]
    assert main([*argv, "--textbook", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["drafts_per_block"] == int(gamma) and row["decode_tau"] is None
    assert row["speedup"] == pytest.approx(row["tau"] / (int(gamma) * row["c"] + 1.0), rel=1e-12)
    assert row["gamma_c_plus_v"] == pytest.approx(int(gamma) * row["c"] + 1.0, rel=1e-12)


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", "--gamma", "5", "--context-tokens", "999999"],
        ["predict", "--gamma", "5", "--max-new-tokens", "3"],
        ["predict", "--gamma", "5", "--new-tokens", "64"],  # it printed n/a columns and a note, exit 0
        ["sweep", "--gamma", "1-3", "--textbook", "--context-tokens", "99999"],
    ],
)
def test_a_published_ratio_refuses_the_flags_that_shape_a_walk(capsys, argv):
    """The default profile publishes γ·c + v at one γ and walks no requests: a context or a token cap would
    change nothing (the output was byte-identical without them), so each is refused, naming the flag."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and argv[-2] in err and argv[-1] in err


def test_the_comparison_says_which_flags_it_does_not_take(capsys):
    """--textbook and --new-tokens shape the per-γ table; the tree/policy comparison walks the traced requests
    through the cost model, and says so where its γ row would otherwise contradict the table above."""
    argv = ["predict", "--profile", "zoo-cpu", "--gamma", "3", "--tree", "4,2,1", "--scenario", "zoo-1img"]
    assert main([*argv, "--method", "M", "--textbook"]) == 0
    assert "note: --textbook applies to the table above, not to this comparison" in capsys.readouterr().out
    assert main([*argv, "--method", "M", "--new-tokens", "64"]) == 0
    assert "note: --new-tokens applies to the table above, not to" in capsys.readouterr().out
    assert main([*argv, "--method", "M"]) == 0
    assert "to the table above" not in capsys.readouterr().out


def test_the_textbook_prices_no_request(capsys):
    """--textbook replaces the measured latency (v = 1, i.i.d. alpha) for the decode block; --new-tokens'
    request columns were still priced on the measured latency, beside a textbook row: refused."""
    argv = ["predict", "--profile", "zoo-cpu", "--gamma", "3", "--method", "M", "--textbook"]
    assert main([*argv, "--new-tokens", "64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: --new-tokens: prices whole requests on the profile's measured")


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--plot", "{d}/same.png", "--sweep-plot", "{d}/same.png"],
        ["recommend", "--engine", "vllm", "--out", "{d}/x.json", "--config-out", "{d}/./x.json"],
    ],
)
def test_two_outputs_naming_one_file_are_refused_before_any_work(tmp_path, capsys, argv):
    """The later write would silently replace the earlier (validate kept one of its two plots)."""
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give each its own" in err
    assert not list(tmp_path.iterdir())


def test_one_scenario_keeps_one_image_count(tmp_path, capsys):
    """An import into a scenario whose entries have another image count is refused before the profile is
    written (predict showed 'ChartQA (0 images)' beside 'ChartQA (1 image)'), as is a profile holding one."""
    from specsim.profiles import load_profile, resolve_profile_path

    out = tmp_path / "ib.json"
    out.write_bytes(resolve_profile_path("ibed-llava1.5-7b-68m").read_bytes())
    before = out.read_bytes()
    scrape = "notebooks/data/engines/vllm_scrape_1.prom"
    argv = ["import", "vllm", scrape, "--method", "new", "--scenario", "ChartQA", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'ChartQA'" in err and "0 images" in err
    assert out.read_bytes() == before
    assert main([*argv, "--images-per-prompt", "1"]) == 0
    doc = json.loads(out.read_text())
    doc["acceptance"][-1]["images_per_prompt"] = 2
    out.write_text(json.dumps(doc))
    with pytest.raises(SpecsimError, match="one scenario is one workload"):
        load_profile(str(out))


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            ["--gamma", "5", "--gamma-max", "2"],
            "--gamma-max: bounds the gamma searched, and --gamma fixes it",
        ),
        (["--tree-max-nodes", "8"], "--tree-max-nodes: bounds the token trees --trees searches; add --trees"),
    ],
)
def test_hardware_refuses_a_bound_on_a_search_it_does_not_run(capsys, extra, named):
    """The plan ran at --gamma 5, and searched no trees, without a word about the bound given."""
    assert main(["hardware", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--batch", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err
    argv = ["hardware", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--batch", "1", "--json"]
    assert main([*argv, "--gamma-max", "4"]) == 0
    assert {r["best_gamma"] for r in json.loads(capsys.readouterr().out)["plan"]["rows"]} <= {1, 2, 3, 4}


def test_sweep_explains_only_the_marks_it_prints(capsys):
    """Every unpriced cell prints n/a without a mark: no legend for a '*' the table does not show."""
    assert main(["sweep", "--gamma", "1-8", "--scenario", "PororoSV", "--method", "M"]) == 0
    out = capsys.readouterr().out
    assert "*" not in out.split("\n\n")[1] and "* tau extrapolated" not in out
    assert main(["sweep", "--gamma", "1-8", "--scenario", "PororoSV", "--method", "M", "--textbook"]) == 0
    out = capsys.readouterr().out
    assert "1.09*+" in out and "* tau extrapolated from another gamma" in out


def test_version_is_the_packages_and_help_gives_the_whole_block(capsys):
    """--version prints the version pyproject.toml ships; the help's formula carries the overhead o that
    every table prints (it read tau / (gamma*c + v))."""
    from pathlib import Path

    import tomllib

    shipped = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"specsim {shipped}\n"
    for argv in (["--help"], ["predict", "--help"], ["hardware", "--help"], ["recommend", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "v + o)" in " ".join(capsys.readouterr().out.split()), argv


def test_a_binary_metrics_file_is_not_called_json(tmp_path, capsys):
    """decode_utf8 reads every text format: the NUL-byte error said 'expected UTF-8 JSON text' of a .prom."""
    prom = tmp_path / "m.prom"
    prom.write_bytes(b"vllm:a 1\x00\n")
    assert (
        main(
            [
                "import",
                "vllm",
                str(prom),
                "--method",
                "x",
                "--scenario",
                "y",
                "--out",
                str(tmp_path / "o.json"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "contains NUL bytes" in err and err.rstrip().endswith("expected UTF-8 text")


@pytest.mark.parametrize("flag", ["--split-mode", "--draft-one-gpu", "--draft-sharded"])
def test_hardware_refuses_a_placement_over_one_gpu(capsys, flag):
    """How --tp GPUs share the models means nothing at --tp 1: the plan ran as without it, without a word."""
    argv = ["hardware", "--target", "llama-2-70b", "--draft", "llama-2-7b", "--alpha", "0.7", "--batch", "1"]
    assert main([*argv, *([flag, "layer"] if flag == "--split-mode" else [flag])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "places the model over --tp GPUs, and --tp is 1" in err
    assert main([*argv, *([flag, "layer"] if flag == "--split-mode" else [flag]), "--tp", "2", "--json"]) == 0


def test_cpu_device_refuses_an_empty_name(tmp_path, capsys):
    """A device is chosen by its name: --name '' was written into the file."""
    out = tmp_path / "d.json"
    assert main(["calibrate", "cpu-device", "--name", " ", "--out", str(out)]) == 2
    assert "--name: expected a device name, got ' '" in capsys.readouterr().err and not out.exists()


def test_predict_refuses_a_token_cap_beside_new_tokens_unless_a_comparison_reads_it(capsys):
    """--new-tokens prices requests of its own length, so --max-new-tokens (40 or 1000) changed no byte."""
    argv = ["predict", "--gamma", "3", "--profile", "zoo-h200", "--scenario", "zoo-1img", "--method", "M"]
    assert main([*argv, "--new-tokens", "64", "--max-new-tokens", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: --max-new-tokens: caps the traced requests, and --new-tokens")
    assert main([*argv, "--new-tokens", "64", "--max-new-tokens", "1000", "--tree", "2,1"]) == 0


@pytest.mark.parametrize(
    "extra",
    [["--tree", "4,2"], ["--policy", "fixed:3"], ["--best-tree"], ["--tree", "chain:2", "--best-tree"]],
)
def test_trees_and_policies_on_a_published_ratio_are_refused(capsys, extra):
    """The default profile publishes gamma*c+v at one gamma: a tree or policy walks requests it cannot price,
    and printed a row of n/a per method with exit 0."""
    assert main(["predict", "--gamma", "4", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim: error: {extra[0]}") and "gives gamma*c+v only as published" in err


@pytest.mark.parametrize("command", ["hardware", "recommend", "serve"])
def test_help_names_every_shipped_pair_and_runtime(capsys, command):
    """--pair named 2 of the 3 presets and --runtime 5 of the 9 shipped runtimes."""
    from specsim.hardware.runtime import runtime_names
    from specsim.presets import pairs

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in [*pairs(), *runtime_names()]) and "tensorrt-llm" in text


def test_hardware_help_names_every_weight_dtype_and_the_split_roofline(capsys):
    """--dtype's help listed 9 of the 11 formats (not float8, mxfp4), and the description said one max over
    the whole pass where attention and the matmuls each take theirs, one after the other."""
    from specsim.hardware.weight_formats import WEIGHT_DTYPES, dtype_bytes

    with pytest.raises(SystemExit):
        main(["hardware", "--help"])
    text = " ".join(capsys.readouterr().out.replace("per- forward", "per-forward").split())
    assert all(dtype_bytes(d) > 0 and d in text for d in WEIGHT_DTYPES) and "mxfp4" in text
    assert "attention kernels and its matmuls each take max(" in text
