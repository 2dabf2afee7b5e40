"""`specsim tune` on the command line, and the engine settings it prints: a tuned schedule written for each
engine means what the simulation priced; bad input and a missing extra are one line, exit 2."""

import bisect
import json
import subprocess
import sys
import textwrap

import pytest

from specsim.cli.main import main, source_tree_entry_points
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.serve.compare import Workload
from specsim.tune.paste import engine_configs, policy_schedule
from specsim.tune.space import parse_draft_option
from specsim.tune.study import TrialRecord
from specsim.tune.trial import Deployment, TrialConfig, TuneContext, decode_batch, run_trial

BANDS = GammaPolicy(5, ((9, 32, 3), (33, 4096, 0)))
BASE = [
    "tune",
    "--alpha",
    "0.7",
    "--no-progress",
    "--requests",
    "30",
    "--output-tokens",
    "16",
    "--rate",
    "10",
]


LLAVA = TuneContext("llava-1.5-7b", Workload(30, 128, 1, 16), 10.0)


def _record(policy, max_num_seqs=64, draft="llava-1.5-68m@0.7"):
    dep = Deployment("h100-sxm", None, 1, parse_draft_option(draft), policy, max_num_seqs)
    result = run_trial(TrialConfig(LLAVA, dep))
    return TrialRecord(0, dep, result, 0.0, True)


def _configs(rec, target, context=LLAVA, **kw):
    """engine_configs at the load's mean decode batch, as the report takes it."""
    batch = decode_batch(context, rec.deployment, rec.result)
    return engine_configs(rec, target, max_num_batched_tokens=8192, batch=batch, **kw)


def _trtllm_gamma(schedule: dict, batch: int) -> int:
    """TensorRT-LLM's lookup (PR #10860): the K of the first key >= the batch, 0 above the largest key."""
    keys = sorted(schedule)
    i = bisect.bisect_left(keys, batch)
    return schedule[keys[i]] if i < len(keys) else 0


def _vllm_gamma(config: dict, batch: int) -> int:
    for lo, hi, k in config.get("num_speculative_tokens_per_batch_size", []):
        if lo <= batch <= hi:
            return k
    return config["num_speculative_tokens"]


def test_each_engine_gets_the_schedule_that_was_priced():
    rec = _record(BANDS)
    assert policy_schedule(BANDS, 64) == ((1, 8, 5), (9, 32, 3), (33, 64, 0))
    c = _configs(rec, "llava-1.5-7b", ids={"llava-1.5-68m": "org/d"})
    trt = c.tensorrt_llm
    assert trt["max_draft_len"] == 5 and trt["speculative_model"] == "org/d"
    for b in range(1, 65):
        assert _vllm_gamma(c.vllm, b) == _trtllm_gamma(trt["draft_len_schedule"], b) == BANDS.gamma_at(b)
    at = max(1, round(rec.result.metrics.mean_decode_batch))  # the load's decode batch, as serve reads it
    assert c.single_gamma == BANDS.gamma_at(at)
    assert c.sglang[c.sglang.index("--speculative-num-steps") + 1] == str(c.single_gamma)
    assert c.llama_cpp[c.llama_cpp.index("--spec-draft-n-max") + 1] == str(c.single_gamma)
    yaml = pytest.importorskip("yaml")  # the extra file TensorRT-LLM reads: integer batch keys
    assert yaml.safe_load(c.trtllm_yaml) == {"speculative_config": trt} and 8 in trt["draft_len_schedule"]
    assert f"-c {rec.result.kv_cache_tokens}" in dict(c.commands)["llama.cpp"]
    vllm = dict(c.commands)["vLLM"]
    assert vllm.startswith("vllm serve llava-hf/llava-1.5-7b-hf --tensor-parallel-size 1 --max-num-seqs 64")
    assert json.loads(vllm.split("--speculative-config ", 1)[1].strip("'")) == c.vllm


def test_what_an_engine_cannot_hold_is_a_note_and_sd_off_writes_no_config():
    rising = _record(GammaPolicy(2, ((9, 4096, 4),)), 16)
    c = _configs(rising, "llava-1.5-7b")
    assert c.tensorrt_llm is None and c.vllm["num_speculative_tokens_per_batch_size"] == [
        [1, 8, 2],
        [9, 16, 4],
    ]
    assert any("TensorRT-LLM gets no speculative settings" in n for n in c.notes)
    assert any("llava-1.5-68m has no Hugging Face id" in n for n in c.notes)  # the draft kept its name
    off = _configs(_record(GammaPolicy(0), 8), "llava-1.5-7b")
    assert off.vllm is off.sglang is off.tensorrt_llm is off.llama_cpp is None
    assert "--speculative-config" not in dict(off.commands)["vLLM"] and any(
        "SD is off" in n for n in off.notes
    )
    text_only = _configs(_record(BANDS, 8, "llava-1.5-68m:T@0.6"), "llava-1.5-7b")
    assert any("image axis T" in n for n in text_only.notes)


def test_a_drafting_kinds_configs_name_the_registrys_engine_methods():
    """An n-gram trial pastes vLLM's method ngram with the lookup's settings and no draft model; an
    EAGLE-3 trial its head, under each engine's name for the kind (the registry's)."""
    context = TuneContext("llama-3.1-8b", Workload(30, 128, 0, 16), 10.0)
    for spec, vllm, sglang, trt in (
        (":ngram@0.6", "ngram", "NGRAM", "NGram"),
        (":eagle3@0.7", "eagle3", "EAGLE3", "Eagle3"),
    ):
        dep = Deployment("h100-sxm", None, 1, parse_draft_option(spec), BANDS, 16)
        rec = TrialRecord(0, dep, run_trial(TrialConfig(context, dep)), 0.0, True)
        c = _configs(rec, "llama-3.1-8b", context)
        assert c.vllm["method"] == vllm and c.sglang[1] == sglang and c.tensorrt_llm["decoding_type"] == trt
        assert c.llama_cpp is None and any("llama.cpp has no method" in n for n in c.notes)
        assert f'"method": "{vllm}"' in dict(c.commands)["vLLM"]
        if vllm == "ngram":
            assert "model" not in c.vllm and c.vllm["prompt_lookup_max"] == 5
            assert (
                "speculative_model" not in c.tensorrt_llm and "--speculative-draft-model-path" not in c.sglang
            )
        else:
            assert (
                c.vllm["model"]
                == c.tensorrt_llm["speculative_model"]
                == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
            )


def test_cli_prints_the_best_per_device_and_the_configs_and_json_holds_every_trial(capsys, tmp_path):
    argv = BASE + ["--gamma", "0-3", "--max-num-seqs", "8,16", "--model-id", "llava-1.5-68m=org/draft"]
    assert main(argv + ["--plot", str(tmp_path / "front.png")]) == 0
    text = capsys.readouterr().out
    assert "search: exhaustive over 8 deployments" in text and "best on h100-sxm: tokens-per-gpu" in text
    assert "vLLM: vllm serve llava-hf/llava-1.5-7b-hf" in text and '"model": "org/draft"' in text
    assert "validation (at batch" in text and "latency-throughput front" in text
    assert (tmp_path / "front.png").read_bytes()[:4] == b"\x89PNG"
    assert main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["trials"]) == out["space"]["size"] == 8 and out["search"]["simulations"] == 8
    best = out["best"][0]
    values = [t["value"] for t in out["trials"] if t["feasible"]]
    assert best["trial"]["value"] == max(values)
    assert best["engine_configs"]["vllm_speculative_config"]["model"] == "org/draft"


def test_an_exhaustive_search_cut_short_by_trials_says_so(capsys):
    argv = BASE + ["--gamma", "0-3", "--max-num-seqs", "8,16", "--search", "exhaustive", "--trials", "3"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "search: exhaustive over 8 deployments" in text
    assert "3 of them tried, so the best below is the best of those (--trials 8 covers them all" in text


def test_a_study_resumes_from_the_command_line(capsys, tmp_path):
    argv = BASE + ["--gamma", "0-5", "--storage", str(tmp_path / "s.db"), "--search", "tpe", "--json"]
    assert main(argv + ["--trials", "4"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv + ["--trials", "6"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(again["trials"]) == 6 and again["trials"][:4] == first["trials"]


def test_the_report_reads_the_decode_batch_also_from_a_stored_study(capsys, tmp_path):
    """Validation and the one-γ engines take the load's mean decode batch (requests per step that decodes, as
    `specsim serve` reads it), not its mean concurrency; a result read back from the store keeps no decode
    batch, so the report simulates the best again rather than reading batch 1."""
    from specsim.tune.trial import Deployment

    argv = [*BASE[:-1], "400", "--gamma", "0-5", "--storage", str(tmp_path / "s.db"), "--json"]  # 400 req/s
    reports = []
    for _ in range(2):  # the second run reads every trial back from the store
        assert main(argv + ["--trials", "3"]) == 0
        reports.append(json.loads(capsys.readouterr().out)["best"][0])
    context = TuneContext("llava-1.5-7b", Workload(30, 512, 1, 16), 400.0)
    run = run_trial(TrialConfig(context, Deployment.from_json(reports[0]["trial"]["deployment"])))
    batch = round(run.metrics.mean_decode_batch)
    assert batch > 1 and [r["validation"]["batch"] for r in reports] == [batch, batch]
    assert reports[0]["engine_configs"] == reports[1]["engine_configs"]


@pytest.mark.parametrize(
    "address, said",
    [
        (
            "foo:bar",
            "--ray-address: expected auto or HOST:PORT (ray://HOST:PORT for Ray Client), got 'foo:bar'",
        ),
        ("", "--ray-address: expected auto or HOST:PORT"),
        ("127.0.0.1:1", "--ray-address 127.0.0.1:1: nothing answers there"),  # it retried for minutes
    ],
)
def test_a_ray_address_that_cannot_be_reached_is_one_line(capsys, address, said):
    """Ray's own errors were tracebacks (a ValueError, a ConnectionError), or retries past any timeout."""
    pytest.importorskip("ray")
    assert main([*BASE, "--trials", "2", "--executor", "ray", "--ray-address", address]) == 2
    assert _one_line(capsys).startswith(f"specsim: error: {said}")


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--prompt-tokens", "0", "--images", "0"], "--prompt-tokens/--images: every request needs"),
        (["--max-num-batched-tokens", "0"], "tune: argument --max-num-batched-tokens: expected an integer"),
    ],
)
def test_a_load_no_deployment_can_serve_is_one_line_and_exit_2(capsys, extra, said):
    """They exited 0: every trial infeasible, the reason printed as 'no deployment ... fits'."""
    assert main([*BASE, "--trials", "2", "--gamma", "3", *extra]) == 2
    assert _one_line(capsys).startswith(f"specsim: error: {said}")
    assert main([*BASE, "--trials", "1", "--gamma", "3", "--prompt-tokens", "0", "--images", "1"]) == 0


def test_with_sd_off_the_notes_name_only_what_the_lines_hold(capsys):
    """SD off at every batch: it asked to replace the draft's name 'in the lines below', where none was, and
    said 'TARGET.gguf stand'."""
    assert main([*BASE, "--trials", "1", "--gamma", "0"]) == 0
    out = capsys.readouterr().out
    assert "replace 'llava-1.5-68m'" not in out and "TARGET.gguf stands for yours" in out


def test_no_feasible_trial_writes_no_plot(capsys, tmp_path):
    """It wrote a PNG of empty axes (and matplotlib warned of a legend with no artists)."""
    png = tmp_path / "front.png"
    argv = [*BASE, "--trials", "1", "--gamma", "3", "--device", "t4"]  # llava-1.5-7b leaves T4 no KV cache
    assert main([*argv, "--plot", str(png)]) == 0
    err = capsys.readouterr().err
    assert err == f"specsim: warning: --plot {png}: not written, no feasible trial to plot\n"
    assert not png.exists()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specsim: error: "), err
    return err


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--device", "h100x"], "--device: unknown device 'h100x'"),
        (["--draft", "llava-1.5-68m"], "--draft: expected [MODEL][:KIND][:M|T]@ACCEPTANCE"),
        (["--draft", "llava-1.5-68m@1.5"], "expected an i.i.d. alpha in [0, 1)"),
        (["--draft", "llava-1.5-68m:X@0.5"], "KIND: expected one of model, eagle, eagle3"),
        (["--draft", ":foo@0.5"], "--draft ':foo@0.5': KIND: expected one of model"),  # was "unknown model"
        (["--draft", "llava-1.5-68m:ngram@0.5"], "drafting kind 'ngram' uses no model"),
        (["--draft", ":eagle@0.5"], "ships for 'llava-1.5-7b'); write it before the kind: HEAD:eagle@0.5"),
        (["--draft", "llava-1.5-6m@0.5"], "unknown model 'llava-1.5-6m'"),
        (["--objective", "goodput"], "--objective goodput: needs --slo"),
        (["--device", "h200", "--objective", "usd-per-mtok"], "device 'h200' has no price"),
        (["--gamma-breaks", "32,8x"], "--gamma-breaks: expected integers"),
        (["--gamma", "3", "--gamma-breaks", "8"], "--gamma-breaks: bands the gamma searched by batch, and"),
        (["--gamma", "2-3", "--gamma-breaks", "256"], "--gamma-breaks: expected breaks below the largest"),
        (["--gamma", "0-2000"], "--gamma: expected values <= 1024"),
        (["--sd-off-from-batch", "never,0"], "--sd-off-from-batch: expected integers >= 1"),
        (["--sd-off-from-batch", "300"], "--sd-off-from-batch: expected at most the largest --max-num-seqs"),
        (["--images", "1:0.5,1:2"], "--images: expected an image count"),
        (["--storage", "study.txt"], "--storage: expected sqlite:///PATH"),
        (["--tp", "3"], "--tp: tensor parallel degree 3: target"),
        (["--runtime", "torch-cpu"], "--runtime: 'torch-cpu' runs on cpu devices"),
        (["--price", "h200=2"], "--price: device 'h200' is not in --device"),
        (["--price", "h100-sxm"], "--price: expected DEVICE=USD_PER_HOUR"),
        (["--price", "h100-sxm=nan"], "--price h100-sxm: expected a value in 0..1e+06 (usd_per_hour)"),
        (["--price", "h100-sxm=2"], "--price: prices the usd-per-mtok objective, and the objective is"),
        (["--slo", "tpot=fast"], "--slo: expected bounds in ms"),
        (["--ray-address", "auto"], "--ray-address: applies with --executor ray"),
        (["--trials", "0"], "argument --trials: expected an integer"),
        (["--alpha", "nan"], "argument --alpha: expected 0 <= alpha < 1"),
        # one device however spelt (hardware's rule): each was searched and reported apart
        (["--device", "h100,h100-sxm"], "--device: device 'h100-sxm' given twice"),
        (["--device", "l4,L4"], "--device: device 'l4' given twice"),
        (["--model-id", "llava-1.5-68m=a/b", "--model-id", "llava-1.5-68m=c/d"], "68m' given twice"),
        (["--storage", "s.db", "--study-name", ""], "argument --study-name: expected a name or path, got ''"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, extra, expected):
    monkeypatch.chdir(tmp_path)  # a --storage accepted by mistake is made here, not in the checkout
    assert main(BASE + extra) == 2
    assert expected in _one_line(capsys)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("g.db", "not an SQLite study store (file is not a database)"),
        ("g.log", "cannot open study 'specsim-tune' there ("),
    ],
)
def test_a_storage_file_that_holds_no_study_is_one_line(capsys, tmp_path, name, expected):
    """A file of other text under --storage is refused in one line naming it (it was a driver's traceback,
    exit 1); a store in a folder not yet made is made there, as every other output's folder is."""
    (tmp_path / name).write_text("garbage\n")
    assert main([*BASE, "--trials", "2", "--storage", str(tmp_path / name)]) == 2
    assert f"--storage '{tmp_path / name}': {expected}" in _one_line(capsys)
    assert main([*BASE, "--trials", "2", "--storage", str(tmp_path / "new" / name), "--json"]) == 0
    assert (tmp_path / "new" / name).stat().st_size > 0


def test_alpha_needs_a_pair_and_a_trace_takes_no_shape(capsys, tmp_path):
    assert main(["tune", "--target", "llava-1.5-7b", "--alpha", "0.7"]) == 2
    assert "--alpha: sets the acceptance of --pair's draft" in _one_line(capsys)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.1, "prompt_tokens": 10, "images": 1, "output_tokens": 4}\n')
    assert main(["tune", "--alpha", "0.7", "--trace", str(trace), "--images", "2"]) == 2
    assert "--images: does not apply with --trace (the trace gives every request)" in _one_line(capsys)
    for flag, value in (("--prompt-tokens", "64"), ("--output-tokens", "64"), ("--requests", "1000")):
        # were silently ignored beside a trace (the last is the default, given)
        assert main(["tune", "--alpha", "0.7", "--trace", str(trace), flag, value]) == 2
        assert f"{flag}: does not apply with --trace" in _one_line(capsys)


def test_a_vllm_bench_result_is_a_tune_workload(tmp_path, capsys):
    """serve --trace read a vLLM bench result and tune --trace (help: 'as serve --trace') refused it."""
    pytest.importorskip("optuna")
    body = {"request_rate": 4.0, "burstiness": 1.0, "input_lens": [120, 300], "output_lens": [16, 8]}
    (tmp_path / "result.json").write_text(json.dumps(body))
    argv = ["tune", "--alpha", "0.7", "--no-progress", "--trials", "2", "--json"]
    assert main([*argv, "--trace", str(tmp_path / "result.json")]) == 0
    assert all(t["result"]["metrics"]["requests"] == 2 for t in json.loads(capsys.readouterr().out)["trials"])


@pytest.mark.parametrize(
    "blocked, argv, expected",
    [
        ("optuna", [], "specsim tune needs the tune extra (optuna is not installed)"),
        ("ray", ["--executor", "ray"], "--executor ray: needs the tune extra (ray is not installed)"),
    ],
)
def test_without_the_tune_extra_one_line_names_what_to_install(blocked, argv, expected):
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] == {blocked!r}:
                    raise ModuleNotFoundError('blocked', name=name)
                return None
        sys.meta_path.insert(0, Block())
        import specsim.cli.main
        sys.exit(specsim.cli.main.main({["tune", "--alpha", "0.7", "--no-progress", *argv]!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert expected in proc.stderr and "pip install -e '.[tune]'" in proc.stderr


def test_a_checkout_registers_the_commands_its_install_predates(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "specsim-mllm"\n[project.entry-points."specsim.commands"]\n'
        'serve = "specsim.cli.cmd_serve:register"\ntune = "specsim.cli.cmd_tune:register"\n'
    )
    found = source_tree_entry_points({"serve"}, tmp_path)
    assert [(e.name, e.value) for e in found] == [("tune", "specsim.cli.cmd_tune:register")]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "another"\n')
    assert source_tree_entry_points(set(), tmp_path) == []
    with pytest.raises(SpecsimError):
        parse_draft_option("@0.5")


@pytest.mark.parametrize("suffix", [".log", ".db"])
def test_processes_started_together_join_one_study(tmp_path, suffix):
    storage = str(tmp_path / f"joined{suffix}")
    argv = BASE + ["--gamma", "0-7", "--max-num-seqs", "4,8,16", "--search", "tpe", "--trials", "12"]
    argv += ["--batch", "2", "--storage", storage, "--json"]
    code = f"import sys, specsim.cli.main as m; sys.exit(m.main({argv!r}))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in "ab"
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e.decode()[-1500:] for _, e in outs]
    made = [json.loads(o)["search"]["simulations"] for o, _ in outs]
    from specsim.tune.executor import LocalExecutor
    from specsim.tune.objective import make_objective
    from specsim.tune.space import parse_space
    from specsim.tune.study import StudyPlan, run_study

    space = parse_space(devices="h100-sxm", drafts=["llava-1.5-68m@0.7"], gammas="0-7", max_num_seqs="4,8,16")
    obj = make_objective("tokens-per-gpu", has_slo=False, slo_attainment=0.9, devices=space.devices)
    context = TuneContext("llava-1.5-7b", Workload(30, 512, 1, 16), 10.0)
    with LocalExecutor(1) as ex:
        held = run_study(space, context, obj, StudyPlan("tpe", 12, 2, storage=storage), ex)
    assert held.simulations == 0 and 12 <= len(held.records) <= 16
    assert len({r.number for r in held.records}) == len(held.records)
    assert sum(made) >= len({r.deployment for r in held.records})  # each setting simulated by a process


def test_a_trace_a_mix_and_a_device_where_nothing_fits(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [
        {"arrival_s": 0.05 * i, "prompt_tokens": 64, "images": i % 3, "output_tokens": 8} for i in range(20)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["tune", "--alpha", "0.7", "--no-progress", "--trace", str(trace), "--gamma", "0,2"]) == 0
    assert "workload: trace of 20 requests" in capsys.readouterr().out
    argv = BASE + ["--images", "0:1,2:1", "--gamma", "0,2", "--device", "h100-sxm,t4"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "+ images 0:0.50,2:0.50 ->" in text and "best on h100-sxm" in text
    assert "no deployment on t4 fits: llava-1.5-7b and llava-1.5-68m leave no room for a KV cache" in text


def test_images_on_a_text_only_target_are_refused_and_its_default_is_none(capsys, tmp_path):
    """--images (a count or a mix) or a trace's images on a text-only target: one line, as serve --images
    says (they were kept in the workload and priced as nothing); its default is then 0 images."""
    qwen = ["tune", "--alpha", "0.7", "--pair", "qwen2.5-coder-0.5b-1.5b", "--trials", "2"]
    for images in ("1", "0:1,2:1"):
        assert main([*qwen, "--images", images]) == 2
        err = _one_line(capsys)
        assert "--images: requests carry up to" in err and "qwen2.5-coder-1.5b has no vision tower" in err
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "images": 1}\n')
    assert main([*qwen, "--trace", str(trace)]) == 2
    assert "--trace: requests carry up to 1 image(s)" in _one_line(capsys)
    assert main([*qwen, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context"]["workload"]["images"] == 0


def test_a_token_budget_below_one_image_is_refused_before_the_study(capsys):
    """One image's tokens per step is the target's, whatever the deployment: a smaller
    --max-num-batched-tokens is one line before any trial (every trial was infeasible, and tune exited 0)."""
    assert main([*BASE, "--trials", "2", "--max-num-batched-tokens", "10"]) == 2
    assert "--max-num-batched-tokens: expected at least one image's 576 tokens per step" in _one_line(capsys)
    qwen = ["tune", "--alpha", "0.7", "--pair", "qwen2.5-coder-0.5b-1.5b", "--trials", "2", "--no-progress"]
    assert main([*qwen, "--max-num-batched-tokens", "10", "--requests", "30", "--json"]) == 0  # no image


def test_a_price_and_a_device_are_read_by_one_name_however_spelt(capsys):
    """--device H100-SXM with --price h100-sxm=2 was refused ('not in --device (H100-SXM)'), and
    --price h100=2 beside --device h100-sxm too; serve took both."""
    argv = [*BASE, "--objective", "usd-per-mtok", "--json"]
    for device, price in (("H100-SXM", "h100-sxm=2"), ("h100-sxm", "h100=2"), ("h100", "H100-SXM=2")):
        assert main([*argv, "--device", device, "--price", price]) == 0
        assert json.loads(capsys.readouterr().out)["best"][0]["device"] == "h100-sxm"
    assert main([*argv, "--price", "h100=2", "--price", "h100-sxm=3"]) == 2
    assert "--price: device 'h100-sxm' given twice" in _one_line(capsys)


def test_a_model_id_for_no_model_of_the_study_or_no_id_is_refused(capsys):
    """--model-id foo=bar/baz named no model and changed nothing; 'not an id' went into the engine lines."""
    assert main([*BASE, "--trials", "2", "--model-id", "foo=bar/baz"]) == 2
    assert "'foo' names no model of this study (expected one of llava-1.5-68m, llava-1.5-7b)" in _one_line(
        capsys
    )
    assert main([*BASE, "--trials", "2", "--model-id", "llava-1.5-68m=not an id"]) == 2
    assert "'not an id' is not a model id" in _one_line(capsys)


def test_sd_off_from_a_batch_is_refused_where_sd_never_runs(capsys):
    """--gamma 0 --sd-off-from-batch 4 was taken, and its label said 'off from batch 4' of an SD never on."""
    assert main([*BASE, "--trials", "2", "--gamma", "0", "--sd-off-from-batch", "4"]) == 2
    assert "--sd-off-from-batch: shapes when SD runs, and every --gamma is 0" in _one_line(capsys)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--slo-attainment", "0.5"], "--slo-attainment: the share that must meet --slo; give --slo"),
        (  # goodput counts the requests meeting the SLO; 0.99 was dropped and the JSON said null
            ["--slo", "tpot=8", "--slo-attainment", "0.99"],
            "--slo-attainment 0.99: applies to --objective tokens-per-gpu and usd-per-mtok",
        ),
        (["--study-name", "foo"], "--study-name: names the study in --storage; give --storage"),
        (["--draft", "llava-1.5-68m@0.6", "--draft", "llava-1.5-68m@0.6"], "'llava-1.5-68m@0.6' given twice"),
        (["--gamma-breaks", ""], "--gamma-breaks: expected batch sizes B,..., got ''"),
    ],
)
def test_options_that_would_change_nothing_are_refused(capsys, extra, named):
    """Each ran the study as without it, without a word (serve refuses --slo-attainment without a search)."""
    assert main(BASE + extra) == 2
    assert named in _one_line(capsys)


def test_goodput_where_no_request_meets_the_slo_recommends_nothing(capsys):
    """Every trial was 'feasible' at goodput 0, and the best was SD off (trial 0), ready to paste."""
    pytest.importorskip("optuna")
    assert main([*BASE, "--trials", "3", "--gamma", "0-2", "--slo", "tpot=0.01"]) == 0
    out = capsys.readouterr().out
    assert "trials: 3 (0 feasible)" in out and "best on" not in out
    assert (
        "no feasible deployment on h100-sxm among its 3 trials (in none does a request meet the SLO)" in out
    )


def test_an_mtp_deployment_says_the_target_must_ship_its_layers():
    """--draft :mtp@0.8 on LLaVA-1.5 (no MTP layers) printed vLLM's method 'mtp' as ready to paste."""
    rec = _record(GammaPolicy(3), draft=":mtp@0.8")
    notes = _configs(rec, "llava-1.5-7b").notes
    assert any("the engines need llava-hf/llava-1.5-7b-hf to ship them" in n for n in notes)
    assert not any("MTP layers" in n for n in _configs(_record(GammaPolicy(3)), "llava-1.5-7b").notes)
