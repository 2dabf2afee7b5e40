"""`specsim recommend`: best draft length per batch size, vLLM / SGLang config with the documented option
names."""

import argparse
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.engines.engine_config import sglang_server_args, vllm_speculative_config
from specsim.engines.imported import import_vllm
from specsim.engines.recommend import LatencyModel, fixed_gamma_note, fixed_gamma_speedups, recommend
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.roofline import Efficiency, decode_ms, verify_ms
from specsim.presets import pair_models as load_pair
from specsim.presets import preset_names

pytestmark = pytest.mark.skipif(
    "llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed"
)
DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "engines"
SCRAPES = [str(DATA / "vllm_scrape_1.prom"), str(DATA / "vllm_scrape_2.prom")]
BATCHES = (1, 8, 64, 128, 256, 512, 1024)
CONTEXT = 64  # short contexts make big batches compute-bound on an H100, so SD's gain all but vanishes


@pytest.fixture(scope="module")
def setting():
    target, draft = (load_model_spec(n) for n in load_pair("llava-1.5-7b-68m"))
    entry = import_vllm(SCRAPES).entry(method="M", scenario="chat")
    return entry, LatencyModel(target, draft, load_device("h100-sxm"))


def _by_hand(entry, lm, batch: int, gamma_max: int) -> np.ndarray:
    """speedup(γ) = τ(γ)·Tp / (γ·Tq + Tv(γ)) straight from the roofline, τ(γ) from the histogram by hand."""
    hist = np.asarray(entry.accepted_histogram)
    eff = Efficiency()
    tp = decode_ms(lm.target, lm.device, eff, CONTEXT, batch)
    tq = decode_ms(lm.draft, lm.device, eff, CONTEXT, batch)
    out = []
    for g in range(1, gamma_max + 1):
        tau = 1 + sum(min(k, g) * n for k, n in enumerate(hist)) / hist.sum()
        out.append(tau * tp / (g * tq + verify_ms(lm.target, lm.device, eff, g, CONTEXT, batch)))
    return np.asarray(out).ravel()


def test_best_gamma_per_batch_matches_a_direct_computation(setting):
    entry, lm = setting
    rec = recommend(entry, lm, batches=BATCHES, context_tokens=CONTEXT)
    gammas, best = [], []
    for b in BATCHES:
        s = _by_hand(entry, lm, b, 5)
        choice = rec.at(b)
        assert choice.best_gamma == int(np.argmax(s)) + 1 and choice.best_speedup == pytest.approx(
            s.max(), rel=1e-9
        )
        assert choice.gamma == (choice.best_gamma if s.max() >= 1 else 0)
        assert not choice.extrapolated  # gamma <= K = 5: tau read off the counters exactly
        gammas.append(choice.gamma)
        best.append(choice.best_speedup)
    # the physics the table must show: long drafts at small batch, the draft shortening and the gain falling
    # as verification turns compute-bound (v -> 2 at γ = 1, so the best speedup tends to τ(1)/(2 + c))
    assert gammas[0] >= 3 and gammas[-1] <= 1 and gammas == sorted(gammas, reverse=True)
    assert best == sorted(best, reverse=True) and best[0] > 2 and best[-1] < 1.1


def test_schedule_covers_every_batch_and_obeys_vllm_rules(setting):
    entry, lm = setting
    rec = recommend(entry, lm, batches=BATCHES, context_tokens=CONTEXT)
    schedule = rec.schedule()
    # vLLM's documented rules (docs/features/speculative_decoding/dynamic_speculative_decoding.md):
    # ranges start at 1, are sorted and non-overlapping, and each K is 0..num_speculative_tokens.
    assert schedule[0][0] == 1 and schedule[-1][1] == BATCHES[-1]
    assert all(hi >= lo for lo, hi, _ in schedule)
    assert all(b[0] == a[1] + 1 for a, b in zip(schedule, schedule[1:]))
    for lo, hi, g in schedule:
        assert all(rec.at(b).gamma == g for b in (lo, hi, (lo + hi) // 2))
    config = vllm_speculative_config(rec, method="draft_model", draft_model="my/draft")
    assert config["num_speculative_tokens"] == max(g for *_, g in schedule) >= 1
    assert all(0 <= g <= config["num_speculative_tokens"] for *_, g in schedule)


def test_gamma_beyond_k_is_flagged_and_sglang_fixed_gamma(setting):
    entry, lm = setting
    rec = recommend(entry, lm, batches=(1,), context_tokens=CONTEXT, gamma_max=8)
    assert any("extrapolation" in a for a in rec.assumptions)
    if rec.at(1).best_gamma > 5:
        assert rec.at(1).extrapolated
    speeds = fixed_gamma_speedups(entry, lm, 5, max_batch=512, context_tokens=CONTEXT)
    note = fixed_gamma_note(speeds, 5)
    losing = [b for b, s in speeds if s < 1]
    assert losing and losing == list(range(losing[0], losing[-1] + 1))  # one run, to the largest batch
    assert f"below 1x at batch from {losing[0]}" in note


def _vllm_documented_schema(config: dict) -> None:
    """Keys and types of SpeculativeConfig (vllm/config/speculative.py;
    docs/features/speculative_decoding)."""
    documented = {
        "method": str,
        "model": str,
        "num_speculative_tokens": int,
        "num_speculative_tokens_per_batch_size": list,
        "draft_tensor_parallel_size": int,
        "disable_by_batch_size": int,
        "prompt_lookup_max": int,
        "prompt_lookup_min": int,
    }
    for key, value in config.items():
        assert key in documented and isinstance(value, documented[key]), key
    assert config["method"] in {
        "ngram",
        "medusa",
        "mlp_speculator",
        "draft_model",
        "suffix",
        "eagle",
        "eagle3",
        "mtp",
        "ngram_gpu",
    }
    assert config["num_speculative_tokens"] > 0
    for entry in config.get("num_speculative_tokens_per_batch_size", []):
        assert len(entry) == 3 and all(isinstance(x, int) for x in entry)


def _sglang_documented_parser() -> argparse.ArgumentParser:
    """The flags of docs/advanced_features/speculative_decoding.md with their documented value types."""
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN"])
    p.add_argument("--speculative-draft-model-path", type=str)
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    return p


def test_cli_vllm_prints_table_and_writes_valid_config(tmp_path, capsys):
    profile = tmp_path / "imported.json"
    assert (
        main(["import", "vllm", *SCRAPES, "--method", "M", "--scenario", "chat", "--out", str(profile)]) == 0
    )
    capsys.readouterr()
    cfg, full = tmp_path / "spec.json", tmp_path / "rec.json"
    assert (
        main(
            [
                "recommend",
                "--engine",
                "vllm",
                "--profile",
                str(profile),
                "--pair",
                "llava-1.5-7b-68m",
                "--context",
                str(CONTEXT),
                "--batch",
                ",".join(map(str, BATCHES)),
                "--draft-model",
                "my/draft",
                "--config-out",
                str(cfg),
                "--out",
                str(full),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "draft length" in text and "assumptions:" in text and "num_speculative_tokens_per_batch_size" in text
    )
    config = json.loads(cfg.read_text())
    _vllm_documented_schema(config)
    assert config["model"] == "my/draft" and config["num_speculative_tokens_per_batch_size"][-1][2] == 0
    rec = json.loads(full.read_text())
    assert [r["batch_size"] for r in rec["table"]] == list(BATCHES) and rec["config"] == config
    assert any(line.split()[:2] == ["1024", "0"] for line in text.splitlines())  # SD off at batch 1024


def test_cli_sglang_flags_parse_with_the_documented_names(tmp_path, capsys):
    profile = tmp_path / "imported.json"
    assert (
        main(
            [
                "import",
                "sglang",
                str(DATA / "sglang_metrics.prom"),
                "--num-steps",
                "3",
                "--method",
                "EAGLE",
                "--scenario",
                "chat",
                "--out",
                str(profile),
            ]
        )
        == 0
    )
    out = tmp_path / "flags.txt"
    assert (
        main(
            [
                "recommend",
                "--engine",
                "sglang",
                "--profile",
                str(profile),
                "--pair",
                "llava-1.5-7b-68m",
                "--context",
                str(CONTEXT),
                "--batch",
                "1,64,512",
                "--draft-model",
                "my/draft",
                "--config-out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    flags = _sglang_documented_parser().parse_args(shlex.split(out.read_text()))
    assert flags.speculative_algorithm == "STANDALONE" and flags.speculative_draft_model_path == "my/draft"
    assert (
        flags.speculative_eagle_topk == 1
        and flags.speculative_num_draft_tokens == flags.speculative_num_steps + 1
    )
    assert 1 <= flags.speculative_num_steps <= 3
    assert "SGLang has one draft length" in text and "*" in text  # tau away from K = 3 is extrapolated


def test_off_everywhere_gives_no_config(setting):
    entry, lm = setting
    rec = recommend(entry, lm, batches=(1, 4), context_tokens=CONTEXT, min_speedup=100.0)
    assert all(c.gamma == 0 for c in rec.choices)
    assert vllm_speculative_config(rec, draft_model="d") is None
    assert sglang_server_args(rec, at_batch=1, draft_model="d") is None


def test_recommend_bad_input(tmp_path, capsys, setting):
    entry, lm = setting
    with pytest.raises(SpecsimError, match="needs the draft model"):
        vllm_speculative_config(recommend(entry, lm, batches=(1,), context_tokens=CONTEXT), method="eagle")
    profile = tmp_path / "imported.json"
    assert (
        main(["import", "vllm", *SCRAPES, "--method", "M", "--scenario", "chat", "--out", str(profile)]) == 0
    )
    capsys.readouterr()
    base = ["recommend", "--profile", str(profile), "--draft-model", "d"]
    for argv, fragment in [
        (["--engine", "vllm"], "expected --pair NAME or --target (and --draft, or a --draft-kind"),
        (["--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--batch", "0"], "--batch"),
        (["--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--context", "-3"], "--context"),
        (["--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--device", "tpu-v9"], "unknown device 'tpu-v9'"),
        (["--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--method", "Z"], "unknown method 'Z'"),
        (
            ["--engine", "sglang", "--pair", "llava-1.5-7b-68m", "--batch", "1-8", "--at-batch", "9"],
            "--at-batch",
        ),
    ]:
        assert main(base + argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("specsim: error: ") and err.count("\n") == 1 and fragment in err, err


def test_each_engine_s_settings_under_its_own_heading(capsys):
    """llama-server's flags were printed under SGLang's heading (every engine but vLLM's)."""
    base = "recommend --alpha 0.7 --target llama-3.1-8b --draft llama-3.2-1b --batch 1,8".split()
    for engine, heading, flag in [
        ("vllm", "vLLM --speculative-config", '"num_speculative_tokens'),
        ("sglang", "SGLang server flags", "--speculative-num-steps"),
        ("llama.cpp", "llama-server flags", "--spec-draft-n-max"),
    ]:
        assert main([*base, "--engine", engine]) == 0
        text = capsys.readouterr().out
        at = text.index(heading)
        assert flag in text[at:].split("\n")[1], engine
        assert sum(h in text for h in ("vLLM --speculative", "SGLang server", "llama-server flags")) == 1


def test_sd_off_for_the_threshold_says_so(capsys):
    """Below a --min-speedup above 1, SD may still pay: the note names the threshold instead."""
    argv = "recommend --engine vllm --alpha 0.5 --target llama-3.1-8b --draft llama-3.2-1b".split()
    argv += ["--batch", "1,8"]
    assert main([*argv, "--min-speedup", "3"]) == 0
    text = capsys.readouterr().out
    assert "SD does not reach --min-speedup 3 at any evaluated batch size" in text
    assert "does not pay" not in text


def test_help_says_what_the_defaults_are(capsys):
    """recommend has no default pair and prices with the --engine's own runtime."""
    with pytest.raises(SystemExit):
        main(["recommend", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(this or --target is needed)" in text and "(default: llava" not in text
    assert "default: the --engine's own on GPUs" in text and "for SGLang too" not in text


def test_engine_settings_name_the_draft_an_engine_can_load(capsys, tmp_path):
    """A shipped draft given by its alias is written as its Hugging Face id (vLLM and SGLang load ids, not
    specsim's aliases); llama-server reads a GGUF file, so only --draft-model names one there."""
    base = "recommend --alpha 0.7 --target llama-3.1-8b --draft llama-3.2-1b --batch 1,8".split()
    out = tmp_path / "spec.json"
    assert main([*base, "--engine", "vllm", "--config-out", str(out)]) == 0
    assert json.loads(out.read_text())["model"] == "meta-llama/Llama-3.2-1B-Instruct"
    capsys.readouterr()
    assert main([*base, "--engine", "sglang", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)["config"]
    assert flags[flags.index("--speculative-draft-model-path") + 1] == "meta-llama/Llama-3.2-1B-Instruct"
    assert main([*base, "--engine", "llama.cpp", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)["config"]
    assert flags[flags.index("-md") + 1] == "DRAFT.gguf"
    assert main([*base, "--engine", "llama.cpp", "--draft-model", "d.gguf", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)["config"]
    assert flags[flags.index("-md") + 1] == "d.gguf"


def test_llama_server_names_where_its_one_draft_length_loses_and_keeps_no_placeholder(tmp_path, capsys):
    """llama-server takes one --spec-draft-n-max: SGLang's note named the batches where it loses and
    llama.cpp's did not; --config-out saved '-md DRAFT.gguf' where vLLM's placeholder draft is refused."""
    base = "recommend --engine llama.cpp --alpha 0.6 --target llama-3.1-8b --draft llama-3.2-1b".split()
    base += ["--batch", "1,8,64,256", "--at-batch", "64"]
    assert main([*base, "--draft-model", "d.gguf"]) == 0
    out = capsys.readouterr().out
    assert "note: with --spec-draft-n-max 2, SD is predicted below 1x at batch " in out
    conf, saved = tmp_path / "flags.txt", tmp_path / "rec.json"
    assert main([*base, "--config-out", str(conf), "--out", str(saved)]) == 2
    assert "hold the placeholder DRAFT.gguf: give --draft-model PATH.gguf" in capsys.readouterr().err
    assert not conf.exists() and not saved.exists()  # refused before anything is written


def test_a_llama_cpp_profile_names_gammas_it_cannot_price_and_wants_a_gguf_draft(tmp_path, capsys):
    """--gamma-max 10 on a profile measured to gamma 6 stopped at 6 without a word; --config-out wrote
    '-md Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF', a Hub id llama-server cannot load."""
    base = ["recommend", "--engine", "llama.cpp", "--profile", "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu-check"]
    base += ["--min-speedup", "0.5"]
    assert main([*base, "--gamma-max", "10", "--draft-model", "d.gguf"]) == 0
    assert "--gamma-max 10: the profile's passes stop at gamma 6, so gamma 7..10 is not priced" in (
        capsys.readouterr().out
    )
    conf = tmp_path / "flags.sh"
    hub = ["--draft-model", "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "--config-out", str(conf)]
    assert main([*base, *hub]) == 2
    assert "--draft-model: llama-server loads a GGUF file (-md PATH.gguf)" in capsys.readouterr().err
    assert not conf.exists()
    assert main([*base, "--draft-model", "d.gguf", "--config-out", str(conf)]) == 0
    assert "-md d.gguf" in conf.read_text()
