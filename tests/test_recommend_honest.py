"""`specsim recommend` says what its numbers rest on: a draft that is a model id, batch sizes that do not fit,
gamma searched past the measured K, the target's own image tokens, and why v can print below 1."""

import json
import re

import pytest

from specsim.cli.main import main
from specsim.hardware.runtime import RUNTIMES_DIR
from specsim.presets import preset_names

pytestmark = pytest.mark.skipif(
    "llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed"
)
IBED = [
    "recommend",
    "--engine",
    "vllm",
    "--profile",
    "ibed-llava1.5-7b-68m",
    "--method",
    "M",
    "--scenario",
    "ChartQA",
    "--pair",
    "llava-1.5-7b-68m",
]
LABEL = "LLaVA-1.5-68M (LLaMA-68M, visual instruction tuned)"  # the published profile's draft name
QWEN = ["recommend", "--engine", "vllm", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu-xeon"]


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _one_line_error(rc: int, out: str, err: str) -> str:
    assert rc == 2 and out == "" and err.startswith("specsim: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


# --- 1. the engine config's draft must be a model id ------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_config_out_refuses_the_profiles_draft_label(tmp_path, capsys, engine):
    cfg, full = tmp_path / "c.json", tmp_path / "rec.json"
    argv = [a if a != "vllm" else engine for a in IBED]
    err = _one_line_error(*_run(capsys, argv + ["--config-out", str(cfg), "--out", str(full)]))
    assert LABEL in err and "--draft-model" in err and "org/name" in err
    assert not cfg.exists() and not full.exists()


@pytest.mark.parametrize("bad", ["my draft", "org/name (v2)", "a/b/c d", "org/na--me", "x/y\n"])
def test_config_out_refuses_a_given_draft_that_is_no_model_id(tmp_path, capsys, bad):
    cfg = tmp_path / "c.json"
    err = _one_line_error(*_run(capsys, IBED + ["--draft-model", bad, "--config-out", str(cfg)]))
    assert repr(bad) in err and "--draft-model" in err and not cfg.exists()


@pytest.mark.parametrize("good", ["llava-hf/llava-68m", "/models/llava-68m", "./drafts/68m", "gpt2"])
def test_config_out_writes_a_model_id_or_a_path(tmp_path, capsys, good):
    cfg = tmp_path / "c.json"
    rc, out, err = _run(capsys, IBED + ["--draft-model", good, "--config-out", str(cfg)])
    assert rc == 0, err
    assert json.loads(cfg.read_text())["model"] == good


def test_a_bare_profile_draft_name_is_no_model_id(tmp_path, capsys):
    # typed by the user, a bare name may be a legacy Hub id or a relative folder; read from a profile it is a
    # label ('qwen2.5-coder-0.5b-instruct' is not the Hub's Qwen/Qwen2.5-Coder-0.5B-Instruct)
    cfg = tmp_path / "c.json"
    # on an L4, where SD pays for this pair (on an H100 it does not, and no config is written)
    argv = QWEN + ["--pair", "qwen2.5-coder-0.5b-1.5b", "--device", "l4", "--config-out", str(cfg)]
    err = _one_line_error(*_run(capsys, argv))
    assert "'qwen2.5-coder-0.5b-instruct' (the profile's draft name)" in err and not cfg.exists()


def test_a_presets_draft_label_is_no_model_id(tmp_path, capsys):
    """With no profile the draft priced is the preset's; its label ('llava-1.5-68m') is no Hub id, and no
    shipped model publishes it, so --config-out refuses it rather than write a config no engine loads."""
    cfg = tmp_path / "c.json"
    argv = ["recommend", "--engine", "vllm", "--alpha", "0.7", "--pair", "llava-1.5-7b-68m", "--batch", "1,8"]
    err = _one_line_error(*_run(capsys, argv + ["--config-out", str(cfg)]))
    assert "'llava-1.5-68m' (the preset's draft name)" in err and "--draft-model" in err and not cfg.exists()
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "note: the draft 'llava-1.5-68m' (the preset's draft name) is not a model id" in out


def test_printing_without_config_out_names_the_label_in_a_note(capsys):
    rc, out, _ = _run(capsys, IBED)
    assert rc == 0
    notes = [line for line in out.splitlines() if line.startswith("note:") and "not a model id" in line]
    assert len(notes) == 1 and LABEL in notes[0] and "--draft-model" in notes[0]


# --- 2. batch sizes that do not fit are marked -------------------------------------------------------------


def test_schedule_marks_batch_sizes_that_do_not_fit(capsys):
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d", "--json"])
    assert rc == 0
    rec = json.loads(out)
    rows = rec["schedule"]
    assert all({"first_batch", "last_batch", "gamma", "fits"} <= set(r) for r in rows)
    assert rows[0]["first_batch"] == 1 and rows[-1]["last_batch"] == 256
    fits = {r["batch_size"]: r["fits_memory"] for r in rec["table"]}
    assert fits[64] and not fits[128] and not fits[256]
    for r in rows:  # every schedule row is all-fitting or all-not-fitting, and agrees with the table
        for b, ok in fits.items():
            if r["first_batch"] <= b <= r["last_batch"]:
                assert r["fits"] == ok
    no = [r for r in rows if not r["fits"]]
    assert no and no[-1]["last_batch"] == 256
    assert any("do not fit" in n and str(no[0]["first_batch"]) in n for n in rec["notes"])


def test_text_says_which_batch_sizes_do_not_fit(capsys):
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d"])
    assert rc == 0
    lines = [line for line in out.splitlines() if line.startswith("note:") and "do not fit" in line]
    assert len(lines) == 1 and "256" in lines[0]
    sched = [line for line in out.splitlines() if "NOT fit" in line or "does not fit" in line]
    assert sched, out


def test_no_fit_note_when_everything_fits(capsys):
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d", "--batch", "1,8,32"])
    assert rc == 0 and "do not fit" not in out


# --- 3. gamma past the measured K: searched where tau is exact, else a note says how to widen ---


def test_default_search_stops_at_k_and_says_so(capsys):
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d", "--json"])
    assert rc == 0
    rec = json.loads(out)
    assert rec["gamma_max"] == 5 and rec["measured_gamma"] == 5  # published tau at K = 5 only
    notes = [n for n in rec["notes"] if "--gamma-max" in n]
    assert len(notes) == 1 and "measured K" in notes[0] and "i.i.d." in notes[0] and "1..5" in notes[0]


def test_gamma_max_at_k_says_how_to_widen(capsys):
    # HallusionBench: τ high enough that the measured K (5) is the best draft length at some batch sizes
    argv = [a if a != "ChartQA" else "HallusionBench" for a in IBED]
    # on an L4 (the draft's floor per forward counts for less against a slower target than on an H100)
    extra = ["--draft-model", "org/d", "--gamma-max", "5", "--device", "l4", "--json"]
    rc, out, _ = _run(capsys, argv + extra)
    assert rc == 0
    rec = json.loads(out)
    notes = [n for n in rec["notes"] if "--gamma-max" in n]
    # the note names the batches whose best draft length is the measured K; the table's rows agree with it
    found = len(notes) == 1 and re.search(
        r"the best is 5 at batch (\d+)\.\.(\d+), so a longer draft may pay", notes[0]
    )
    assert found, notes
    lo, hi = int(found[1]), int(found[2])
    rows = rec["table"]
    assert any(lo <= r["batch_size"] <= hi for r in rows)
    assert all((r["best_gamma"] == 5) == (lo <= r["batch_size"] <= hi) for r in rows)


def test_gamma_max_past_k_flags_the_extrapolation(capsys):
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d", "--gamma-max", "8", "--json"])
    assert rc == 0
    rec = json.loads(out)
    assert rec["gamma_max"] == 8
    assert any("1..8" in a and "K = 5" in a and "i.i.d." in a for a in rec["assumptions"])
    notes = [n for n in rec["notes"] if "i.i.d." in n and "K = 5" in n]
    assert len(notes) == 1 and "6..8" in notes[0]


def test_traces_replay_past_k_so_the_default_search_goes_on(capsys):
    rc, out, _ = _run(capsys, QWEN + ["--pair", "qwen2.5-coder-0.5b-1.5b", "--json"])
    assert rc == 0
    rec = json.loads(out)
    k = rec["measured_gamma"]
    assert k is not None and rec["gamma_max"] == max(k, 8) > k
    assert not any(r["extrapolated"] for r in rec["table"])
    assert any(f"1..{rec['gamma_max']}" in a and "replayed" in a for a in rec["assumptions"])


# --- 4. image tokens come from the target's spec ----------------------------------------------------------


def test_text_only_target_prints_no_llava_image_tokens(capsys):
    rc, out, _ = _run(capsys, QWEN + ["--pair", "qwen2.5-coder-0.5b-1.5b"])
    assert rc == 0
    assert "576" not in out and "LLaVA-1.5 image" not in out
    assert any("qwen2.5-coder-1.5b" in line and "image" in line for line in out.splitlines()[3:])


def test_image_tokens_are_the_targets_own(tmp_path, capsys):
    from specsim.presets import preset_path

    cfg = json.loads(preset_path("llava-1.5-7b").read_text())
    cfg["image_seq_length"] = 729
    folder = tmp_path / "my-vlm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    argv = [a for a in IBED if a not in ("--pair", "llava-1.5-7b-68m")]
    rc, out, err = _run(capsys, argv + ["--target", str(folder), "--draft", "llava-1.5-68m"])
    assert rc == 0, err
    lines = [line for line in out.splitlines() if "image tokens" in line]
    assert len(lines) == 1 and "729 per image" in lines[0] and "my-vlm" in lines[0]
    assert "576" not in out and "LLaVA-1.5 image" not in out


# --- 5. v below 1 is explained ---------------------------------------------------------------------------


def _untied_vllm(tmp_path) -> str:
    """vLLM's runtime with its GEMM efficiency set apart from (and above) its GEMV one."""
    d = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    gemv = d["memory_efficiency_gemv"]["value"]
    d["memory_efficiency_gemm"] = {"value": min(1.0, gemv * 1.1), "source": "test: above the GEMV one"}
    path = tmp_path / "untied.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_v_below_one_is_explained(capsys, tmp_path):
    rc, out, _ = _run(
        capsys, IBED + ["--draft-model", "org/d", "--batch", "1,4", "--runtime", _untied_vllm(tmp_path)]
    )
    assert rc == 0
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["1"])
    assert float(row[7]) < 1  # v at batch 1
    notes = [line for line in out.splitlines() if line.startswith("note: v < 1")]
    assert len(notes) == 1
    assert "memory_efficiency_gemm" in notes[0] and "memory_efficiency_gemv" in notes[0]
    assert "batch 1" in notes[0]


def test_no_v_note_when_every_v_is_at_least_one(capsys, tmp_path):
    rc, out, _ = _run(
        capsys, IBED + ["--draft-model", "org/d", "--batch", "64", "--runtime", _untied_vllm(tmp_path)]
    )
    assert rc == 0 and "v < 1" not in out


def test_shipped_vllm_prices_verification_at_least_one_target_step(capsys):
    """With one memory efficiency for every row count (vLLM's tie), Tv(γ) >= Tp: v is never below 1."""
    rc, out, _ = _run(capsys, IBED + ["--draft-model", "org/d", "--batch", "1,2,4,8"])
    assert rc == 0 and "v < 1" not in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"], ["4"], ["8"])]
    assert len(rows) == 4 and all(float(r[7]) >= 1.0 for r in rows)


def test_v_note_names_each_batch_once_with_its_gammas(capsys):
    """Rows over three contexts: the note listed batch 4 three times and one row's gamma + 1 for every batch.
    (The README's llama.cpp 70B/7B example showed it; since mul_mat_q is priced past 8 rows, that plan has no
    v < 1 row: a 16-row verification no longer costs less than an 8-row step.)"""
    from types import SimpleNamespace

    from specsim.hardware.plan_notes import v_below_one_note
    from specsim.hardware.runtime import load_runtime

    argv = "hardware --target llama-2-70b --draft llama-2-7b --dtype q4_k_m --alpha 0.7 --runtime llama.cpp"
    assert main([*argv.split(), "--tp", "3", "--device", "rtx-3090", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["rows"] and all(r["v"] >= 1.0 for r in plan["rows"])
    assert not any(a.startswith("v < 1") for a in plan["assumptions"])
    low = [
        SimpleNamespace(batch_size=b, best_gamma=g, v=0.9)
        for b, g in ((2, 4), (4, 2), (4, 3), (4, 2), (8, 1))
    ]
    note = v_below_one_note(low, load_runtime("llama.cpp"))
    assert note.startswith("v < 1 at batch 2 (gamma 4), 4 (gamma 2, 3), 8 (gamma 1): ")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_config_out_with_no_settings_to_write_says_so(tmp_path, capsys, engine):
    """SD never reaches --min-speedup: no settings, and an older --config-out file is not passed off as this
    run's (it was left in place without a word, exit 0)."""
    cfg = tmp_path / "c.json"
    cfg.write_text("older settings\n")
    argv = ["recommend", "--engine", engine, "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--batch", "1,8"]
    rc, out, err = _run(capsys, [*argv, "--min-speedup", "100", "--config-out", str(cfg)])
    assert rc == 0 and f"wrote {cfg}" not in out and cfg.read_text() == "older settings\n"
    assert err == (
        f"specsim: warning: --config-out {cfg}: not written, there are no speculative settings to write: "
        "SD off (the older file there is left as it was)\n"
    )


def test_engine_method_is_one_of_the_engines_names_and_says_which_kind_it_runs(capsys):
    """An unknown --engine-method was written into the config as given; one that names another drafting
    kind than the one priced is written with a note saying so (the README's SGLang EAGLE example)."""
    argv = ["recommend", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--batch", "1,8"]
    err = _one_line_error(*_run(capsys, [*argv, "--engine", "vllm", "--engine-method", "bogus"]))
    assert "--engine-method: expected one of vllm's draft_model, eagle, eagle3" in err and "'bogus'" in err
    rc, out, _ = _run(capsys, [*argv, "--engine", "sglang", "--engine-method", "EAGLE", "--json"])
    got = json.loads(out)
    assert rc == 0 and got["config"][got["config"].index("--speculative-algorithm") + 1] == "EAGLE"
    assert any("EAGLE is sglang's name for drafting kind 'eagle'" in n for n in got["notes"])
    rc, out, _ = _run(capsys, [*argv, "--engine", "vllm", "--engine-method", "draft_model", "--json"])
    assert rc == 0 and not any("--engine-method" in n for n in json.loads(out)["notes"])


@pytest.mark.parametrize(("engine", "method"), [("vllm", "ngram"), ("sglang", "NGRAM")])
def test_a_draft_model_for_a_lookup_method_is_refused(capsys, engine, method):
    """The config carried a model its method never loads: {"method": "ngram", "model": "org/name"}."""
    argv = ["recommend", "--engine", engine, "--alpha", "0.7", "--target", "llava-1.5-7b", "--draft-kind"]
    err = _one_line_error(*_run(capsys, [*argv, "ngram", "--draft-model", "org/name"]))
    assert err == f"specsim: error: --draft-model: {engine}'s {method} drafts with no model; drop it\n"


PLAN_ONLY = [["--batch", "1,8"], ["--context", "4000"], ["--device", "l4"], ["--runtime", "vllm"],
             ["--at-batch", "4"], ["--pair", "zoo"],
             ["--device", "h100-sxm"], ["--context", "1024"]]  # fmt: skip  (the last two: at their defaults)


@pytest.mark.parametrize("extra", PLAN_ONLY)
def test_a_llama_cpp_profile_refuses_the_plan_options_and_keeps_gamma_max(capsys, tmp_path, extra):
    """Priced from the profile's own passes, the answer read none of these (byte-identical), and recommended
    γ 3 under --gamma-max 2; --out went unwritten."""
    argv = ["recommend", "--engine", "llama.cpp", "--profile", "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu"]
    err = _one_line_error(*_run(capsys, [*argv, *extra]))
    assert err.startswith(f"specsim: error: {extra[0]}: shapes the roofline plan, and a llama.cpp profile")
    out = tmp_path / "r.json"
    rc, text, _ = _run(capsys, [*argv, "--gamma-max", "2", "--min-speedup", "0.5", "--out", str(out)])
    got = json.loads(out.read_text())
    assert rc == 0 and sorted(got["speedups"]) == ["1", "2"] and got["gamma"] in (1, 2)
    assert f"--spec-draft-n-max {got['gamma']} " in text


def test_at_batch_is_for_the_engines_with_one_draft_length(capsys):
    """vLLM takes a draft length per batch size: --at-batch changed nothing there, without a word; SGLang and
    llama-server take their one draft length at it, within the batches evaluated."""
    argv = ["recommend", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--batch", "1-8"]
    err = _one_line_error(*_run(capsys, [*argv, "--engine", "vllm", "--at-batch", "4"]))
    assert "--at-batch: applies to SGLang and llama-server" in err
    err = _one_line_error(*_run(capsys, [*argv, "--engine", "llama.cpp", "--at-batch", "9"]))
    assert "--at-batch: expected a batch size in 1..8, got 9" in err
    rc, out, _ = _run(capsys, [*argv, "--engine", "llama.cpp", "--at-batch", "4", "--json"])
    assert rc == 0 and any("chosen for batch 4" in n for n in json.loads(out)["notes"])


def test_recommend_validates_only_the_shipped_runtime(capsys, tmp_path):
    """A runtime file named vllm with other efficiencies carried the shipped vllm's published-row errors."""
    from specsim.hardware.runtime import RUNTIMES_DIR

    mine = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    mine["memory_efficiency_gemv"]["value"] = 0.5
    (tmp_path / "rt.json").write_text(json.dumps(mine))
    argv = ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--json"]
    for runtime, some in (("vllm", True), (str(tmp_path / "rt.json"), False)):
        rc, out, _ = _run(capsys, [*argv, "--runtime", runtime])
        assert rc == 0 and bool(json.loads(out)["validation"]) is some


RECOMMEND = ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([*RECOMMEND, "--alpha", "0.7", "--profile", "zoo-h200"],
         "--alpha/--profile: give one acceptance source, not 2"),  # it named an --acceptance-profile
        ([*RECOMMEND, "--acceptance", "0.7", "--method", "M"],
         "--method: applies with --profile only"),  # recommend has no such option
        (["hardware", "--device", "h200", "--acceptance", "profile:zoo-h200:T"],
         "give profile:zoo-h200:METHOD/SCENARIO"),  # it said to pass --method and --scenario, refused there
    ],
)  # fmt: skip
def test_an_acceptance_error_names_the_options_of_its_command(capsys, argv, said):
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and said in _one_line_error(rc, out, err)
