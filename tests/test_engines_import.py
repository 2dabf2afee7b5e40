"""`specsim import vllm|sglang`: parsing real-format samples, the derived survival and tau, bad inputs,
predict."""

import json
from pathlib import Path

import pytest

from specsim.acceptance.theory import alpha_from_tau, tau_iid
from specsim.cli.main import main
from specsim.engines.imported import import_sglang, import_vllm
from specsim.engines.metric_samples import parse_exposition, read_metrics
from specsim.engines.vllm import SpecCounters, read_counters
from specsim.errors import SpecsimError
from specsim.predict.prediction import predict
from specsim.predict.tau_at_gamma import tau_with_source
from specsim.profile_format import MethodAcceptance, Profile
from specsim.profiles import load_profile

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "engines"
SCRAPE_1, SCRAPE_2 = DATA / "vllm_scrape_1.prom", DATA / "vllm_scrape_2.prom"
# The counters written into the two scrapes (K = 5): drafts, draft tokens, per-position accepted.
S1 = (1200, 6000, (900, 690, 520, 380, 270))
S2 = (4200, 21000, (3120, 2380, 1790, 1320, 940))


def test_scrape_parses_with_total_suffix_and_created_samples_dropped():
    counters, model = read_counters([SCRAPE_2])
    assert model == "llava-hf/llava-1.5-7b-hf"
    assert counters == SpecCounters(S2[0], S2[1], sum(S2[2]), S2[2])
    names = {s.name for s in read_metrics(SCRAPE_2)}
    assert "vllm:spec_decode_num_drafts" in names and not any(
        n.endswith(("_total", "_created")) for n in names
    )


def test_two_scrapes_give_the_window_and_its_exact_tau():
    counters, _ = read_counters([SCRAPE_1, SCRAPE_2])
    drafts = S2[0] - S1[0]
    per_pos = [b - a for a, b in zip(S1[2], S2[2])]
    assert counters.drafts == drafts and counters.accepted_per_pos == tuple(per_pos)
    # survival a_i = per_pos[i-1]/drafts; tau(k) = 1 + sum_{i<=k} a_i, by hand in integers
    assert counters.survival().tolist() == pytest.approx([p / drafts for p in per_pos])
    for k in range(1, 6):
        assert counters.tau(k) == (drafts + sum(per_pos[:k])) / drafts
    assert counters.mean_acceptance_length == counters.tau(5) == 1 + sum(per_pos) / drafts
    assert counters.acceptance_rate == sum(per_pos) / (5 * drafts)
    assert sum(counters.histogram()) == drafts and counters.histogram()[5] == per_pos[4]


def test_labels_in_any_order_several_models_and_data_parallel_engines():
    path = DATA / "vllm_two_models.prom"
    with pytest.raises(SpecsimError, match="several models .*'llava', 'qwen-vl'.*--model"):
        read_counters([path])
    llava, _ = read_counters([path], model="llava")
    assert llava == SpecCounters(100, 300, 150, (70, 50, 30))
    qwen, _ = read_counters([path], model="qwen-vl")  # engines 0 and 1 summed position by position
    assert qwen == SpecCounters(100, 200, 110, (67, 43))
    with pytest.raises(SpecsimError, match="'nope' is not in .*'llava', 'qwen-vl'"):
        read_counters([path], model="nope")


def test_get_metrics_json_equals_the_exposition_form():
    from_json, model = read_counters([DATA / "vllm_get_metrics.json"])
    from_text, _ = read_counters([DATA / "vllm_two_models.prom"], model="llava")
    assert model == "llava" and from_json == from_text


def test_imported_entry_predicts_exact_tau_up_to_k_and_flags_beyond(tmp_path):
    out = tmp_path / "imported.json"
    assert (
        main(
            [
                "import",
                "vllm",
                str(SCRAPE_1),
                str(SCRAPE_2),
                "--method",
                "M",
                "--scenario",
                "chat",
                "--engine-version",
                "0.11.0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    profile = load_profile(str(out))
    entry = profile.acceptance[0]
    counters, _ = read_counters([SCRAPE_1, SCRAPE_2])
    assert entry.gamma == 5 and entry.tau is None and entry.accepted_histogram == counters.histogram()
    prov = entry.provenance
    assert prov.target == "llava-hf/llava-1.5-7b-hf" and prov.software == {"vllm": "0.11.0"}
    assert ".." in prov.date and "vLLM 0.11.0" in prov.notes
    for k in range(1, 6):
        row = predict(profile, k)[0]
        assert row.tau == pytest.approx(counters.tau(k), abs=1e-15) and not row.extrapolated
        assert row.speedup is None  # an imported profile has no latency yet
    beyond = predict(profile, 7)[0]
    # past K = 5 the counters' own curve goes on, each draft accepted at the alpha of tau(5): a_6 = a_5·α,
    # a_7 = a_5·α² (an i.i.d. curve through tau(5) could rise above the measured a_5)
    alpha, a5 = alpha_from_tau(counters.tau(5), 5), counters.tau(5) - counters.tau(4)
    assert beyond.extrapolated and beyond.tau == pytest.approx(counters.tau(5) + a5 * (alpha + alpha**2))
    assert beyond.tau != pytest.approx(tau_iid(alpha, 7), rel=1e-4)


def test_predict_cli_on_an_imported_only_profile(tmp_path, capsys):
    out = tmp_path / "imported.json"
    assert (
        main(["import", "vllm", str(SCRAPE_2), "--method", "M", "--scenario", "chat", "--out", str(out)]) == 0
    )
    capsys.readouterr()
    assert main(["predict", "--profile", str(out), "--gamma", "3"]) == 0
    text = capsys.readouterr().out
    assert "n/a" in text and "2.736" in text  # tau(3) = 1 + (3120+2380+1790)/4200 = 2.7357
    assert main(["predict", "--profile", str(out), "--gamma", "3", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["tau"] == pytest.approx(1 + (3120 + 2380 + 1790) / 4200) and row["speedup"] is None


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_recommend_on_an_imported_profile_prints_a_placeholder_draft(tmp_path, capsys, engine):
    """The command `specsim import` prints next exited 2 ('--draft-model: ... needs the draft model'): an
    imported profile names no draft. The table and config print with a placeholder and a note; only
    --config-out refuses it."""
    out = tmp_path / "imported.json"
    assert (
        main(["import", "vllm", str(SCRAPE_2), "--method", "M", "--scenario", "chat", "--out", str(out)]) == 0
    )
    capsys.readouterr()
    argv = ["recommend", "--engine", engine, "--profile", str(out), "--pair", "llava-1.5-7b-68m"]
    argv += ["--device", "a100-80gb-sxm", "--json"]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)
    assert "DRAFT_MODEL" in json.dumps(rec["config"])
    assert any("'DRAFT_MODEL' (a placeholder: the profile names no draft model)" in n for n in rec["notes"])
    assert main([*argv, "--config-out", str(tmp_path / "c.json")]) == 2
    assert "is not a model id" in capsys.readouterr().err and not (tmp_path / "c.json").exists()


def test_import_adds_to_an_existing_profile_and_keeps_it(tmp_path, profile):
    from specsim.profiles import save_profile

    path = tmp_path / "p.json"
    save_profile(profile, path)
    assert (
        main(
            [
                "import",
                "vllm",
                str(SCRAPE_2),
                "--method",
                "vllm-draft",
                "--scenario",
                "one",
                "--images-per-prompt",
                "1",  # scenario "one" is a one-image workload
                "--out",
                str(path),
            ]
        )
        == 0
    )
    back = load_profile(str(path))
    assert [a.method for a in back.acceptance] == ["M", "MT", "vllm-draft"]
    assert back.latency == profile.latency
    row = next(r for r in predict(back, 4) if r.method == "vllm-draft")
    assert row.speedup is not None  # the existing latency tables now give a speedup


def test_an_import_that_replaces_an_entry_or_meets_another_target_says_so(tmp_path, capsys):
    """SGLang's counters (Qwen2.5-VL) over a vLLM import (LLaVA) of the same method and scenario replaced
    it and printed "added to profile", without a word about the entry gone or the other model."""
    out = str(tmp_path / "served.json")
    argv = ["--method", "draft", "--scenario", "chat", "--out", out]
    assert main(["import", "vllm", str(SCRAPE_1), str(SCRAPE_2), *argv]) == 0
    capsys.readouterr()
    assert main(["import", "sglang", str(DATA / "sglang_metrics.prom"), "--num-steps", "3", *argv]) == 0
    got = capsys.readouterr()
    assert "replaced the entry of method 'draft', scenario 'chat'" in got.err and "(gamma 5, " in got.err
    assert "but profile served's target is 'llava-hf/llava-1.5-7b-hf'" in got.err
    assert "(replaced in profile served)" in got.out
    assert [(a.method, a.gamma) for a in load_profile(out).acceptance] == [("draft", 3)]


def test_entry_provenance_round_trips_and_is_validated():
    imp = import_vllm([SCRAPE_2])
    entry = imp.entry(method="M", scenario="s", engine_version="0.11.0", draft="d", device="H100")
    back = MethodAcceptance.from_json(json.loads(json.dumps(entry.to_json())), "acceptance[0]")
    assert back == entry
    bad = entry.to_json() | {"provenance": {**entry.provenance.to_json(), "source": "engine"}}
    with pytest.raises(SpecsimError, match=r"acceptance\[0\]\.provenance\.source"):
        MethodAcceptance.from_json(bad, "acceptance[0]")
    legacy = {k: v for k, v in entry.to_json().items() if k != "provenance"}  # old profiles have no field
    assert MethodAcceptance.from_json(legacy, "a").provenance is None


def test_sglang_gauge_and_responses():
    gauge = import_sglang(DATA / "sglang_metrics.prom", num_steps=3)
    assert gauge.model == "Qwen/Qwen2.5-VL-7B-Instruct" and gauge.tau == 2.91 and gauge.gamma == 3
    responses = import_sglang(DATA / "sglang_responses.jsonl", num_steps=3, model="qwen")
    # each response's first token is its prefill's, with no verify step (the gauge leaves it out too)
    assert responses.tau == (13 + 8 + 31) / (5 + 3 + 11) and responses.model == "qwen"
    entry = responses.entry(method="EAGLE", scenario="s")
    assert tau_with_source(entry, 3) == (responses.tau, "measured")
    assert tau_with_source(entry, 2)[1] == "iid from gamma=3"  # flagged: SGLang speaks for K only
    with pytest.raises(SpecsimError, match="2.91 is outside 1..num_steps\\+1 = 1..2"):
        import_sglang(DATA / "sglang_metrics.prom", num_steps=1)


def _bad(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run_fails(capsys, argv, out: Path, *fragments):
    assert main(argv + ["--method", "M", "--scenario", "s", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert not out.exists()


def test_malformed_inputs_give_one_line_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "never.json"
    s1, s2 = SCRAPE_1.read_text(), SCRAPE_2.read_text()
    # counter reset: the later scrape is lower (restart) -- or files in the wrong order
    _run_fails(capsys, ["import", "vllm", str(SCRAPE_2), str(SCRAPE_1)], out, "counter reset", "went down")
    # a per-position sample without its position label
    no_pos = s2.replace(',position="3"', "", 1)
    _run_fails(
        capsys, ["import", "vllm", str(_bad(tmp_path, "nopos.prom", no_pos))], out, "no position label"
    )
    # a position missing (0,1,2,4): K cannot be read
    gap = "\n".join(ln for ln in s2.splitlines() if 'position="3"} ' not in ln) + "\n"
    _run_fails(capsys, ["import", "vllm", str(_bad(tmp_path, "gap.prom", gap))], out, "position 3 is missing")
    # K disagreeing between counters: accepted tokens vs the per-position sum, and draft tokens > K x drafts
    acc = s2.replace("} 9550.0", "} 9551.0")
    _run_fails(
        capsys,
        ["import", "vllm", str(_bad(tmp_path, "acc.prom", acc))],
        out,
        "accepted tokens disagree",
        "9551",
    )
    toks = s2.replace("} 21000.0", "} 25200.0")
    _run_fails(capsys, ["import", "vllm", str(_bad(tmp_path, "tok.prom", toks))], out, "K disagrees", "25200")
    _run_fails(capsys, ["import", "vllm", str(SCRAPE_2), "--num-speculative-tokens", "4"], out, "5 positions")
    # K differs between the two scrapes
    short = "\n".join(ln for ln in s1.splitlines() if 'position="4"' not in ln) + "\n"
    short = short.replace("} 2760.0", "} 2490.0").replace("} 6000.0", "} 4800.0")
    _run_fails(
        capsys,
        ["import", "vllm", str(_bad(tmp_path, "k4.prom", short)), str(SCRAPE_2)],
        out,
        "K disagrees between the scrapes",
    )
    # zero drafts in the window
    _run_fails(
        capsys, ["import", "vllm", str(SCRAPE_1), str(_bad(tmp_path, "same.prom", s1))], out, "zero drafts"
    )
    # not exposition text / not a vLLM scrape / unreadable
    _run_fails(
        capsys,
        ["import", "vllm", str(_bad(tmp_path, "junk.prom", "this is { not metrics\n"))],
        out,
        "not Prometheus text exposition",
    )
    _run_fails(
        capsys, ["import", "vllm", str(DATA / "sglang_metrics.prom")], out, "no vLLM spec-decode counters"
    )
    _run_fails(capsys, ["import", "vllm", str(tmp_path / "missing.prom")], out, "does not exist")
    # SGLang: zero verify steps, gauge at 0
    zero = '{"meta_info": {"completion_tokens": 5, "spec_verify_ct": 0}}\n'
    _run_fails(
        capsys,
        ["import", "sglang", str(_bad(tmp_path, "z.jsonl", zero)), "--num-steps", "3"],
        out,
        "zero verify steps",
    )
    idle = (DATA / "sglang_metrics.prom").read_text().replace("} 2.91", "} 0.0")
    _run_fails(
        capsys, ["import", "sglang", str(_bad(tmp_path, "idle.prom", idle)), "--num-steps", "3"], out, "is 0"
    )


def test_json_output_and_parse_error_detail(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert (
        main(
            [
                "import",
                "vllm",
                str(SCRAPE_1),
                str(SCRAPE_2),
                "--method",
                "M",
                "--scenario",
                "s",
                "--out",
                str(out),
                "--json",
                "--show-k",
                "6",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["K"] == 5 and [r["extrapolated"] for r in data["tau"]] == [False] * 5 + [True]
    assert data["tau"][0]["a_k"] == pytest.approx(2220 / 3000) and data["created"] is True
    with pytest.raises(SpecsimError, match="not Prometheus text exposition"):
        parse_exposition('vllm:x{model_name="a} 1\n', "f")


def test_shipped_profiles_still_load_unchanged():
    from specsim.profiles import shipped_profiles

    for name, path in shipped_profiles().items():
        data = json.loads(path.read_text())
        assert Profile.from_json(data).to_json()["acceptance"] == data["acceptance"], name


def test_tau_from_histogram_at_is_the_per_block_truncation():
    from specsim.acceptance.theory import tau_from_histogram, tau_from_histogram_at

    accepted = [0, 3, 1, 3, 2, 0, 3, 3]  # blocks at K = 3
    hist = [accepted.count(j) for j in range(4)]
    for g in (1, 2, 3):
        assert tau_from_histogram_at(hist, g) == sum(1 + min(a, g) for a in accepted) / len(accepted)
    assert tau_from_histogram_at(hist, 3) == pytest.approx(tau_from_histogram(hist))
    with pytest.raises(SpecsimError, match="covers gamma <= 3, got 4"):
        tau_from_histogram_at(hist, 4)
    with pytest.raises(SpecsimError, match="at least one block"):
        tau_from_histogram_at([0, 0], 1)


def test_sglang_rows_say_that_tau_was_measured_at_k_only(tmp_path, capsys):
    """SGLang gives τ at K alone: its k < K rows are i.i.d. too, and the footnote said "past K" and
    "the counters' curve" (a vLLM histogram's words) under them."""
    argv = ["--method", "M", "--scenario", "s", "--out", str(tmp_path / "p.json")]
    assert main(["import", "sglang", str(DATA / "sglang_metrics.prom"), "--num-steps", "3", *argv]) == 0
    out = capsys.readouterr().out
    assert "* not measured: SGLang reports tau at its draft length K = 3 only" in out
    assert "past the" not in out
    assert main(["import", "vllm", str(SCRAPE_1), str(SCRAPE_2), *argv[:-1], str(tmp_path / "v.json")]) == 0
    assert "* past the measured draft length K = " in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--window", "--draft", "--device", "--model", "--engine-version", "--out"])
def test_a_blank_provenance_name_is_refused(tmp_path, capsys, flag):
    """--window '' read as not given and wrote the files' times as the window, without a word."""
    argv = ["import", "sglang", str(DATA / "sglang_metrics.prom"), "--num-steps", "3", "--scenario", "s"]
    argv += ["--method", "M", *(["--out", str(tmp_path / "p.json")] if flag != "--out" else []), flag, " "]
    assert main(argv) == 2 and f"argument {flag}: expected a name or path" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_sglang_file_is_named_empty(tmp_path, capsys, text):
    """A blank file was read as a metrics scrape and refused for a missing gauge."""
    path = tmp_path / "responses.jsonl"
    path.write_text(text)
    argv = ["import", "sglang", str(path), "--num-steps", "3", "--method", "M", "--scenario", "s"]
    assert main([*argv, "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert f"SGLang file {str(path)!r}: empty (expected a /metrics scrape or /generate responses)" in err


@pytest.mark.parametrize("steps", ["1023", "1024"])
def test_a_draft_length_at_the_cap_is_imported_with_its_default_table(tmp_path, capsys, steps):
    """--num-steps takes 1..1024, and the τ table's default (K+2) went past the cap: 'gamma: expected at most
    1024, got 1025', naming no option."""
    argv = ["import", "sglang", str(DATA / "sglang_metrics.prom"), "--num-steps", steps, "--method", "E"]
    assert main([*argv, "--scenario", "c", "--out", str(tmp_path / "s.json")]) == 0
    assert "\n  1024 " in capsys.readouterr().out  # the table runs to the cap
