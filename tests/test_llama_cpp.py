"""llama.cpp as an engine, without running it: its outputs read from small committed recordings
(``tests/data/llama_cpp/``), llama-server's flags and schedule, the per-block fit against known terms, and
every bad option one line, exit 2, before a binary runs."""

import asyncio
import base64
import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from calibrate.llama_cpp import block_terms as bt
from calibrate.llama_cpp.bench_output import parse_batched_jsonl, parse_bench_jsonl
from calibrate.llama_cpp.binaries import find_llama_cpp, parse_cmake_cache, parse_version
from calibrate.llama_cpp.cpu_share import CpuShare, starved
from calibrate.llama_cpp.latency import fit_lookup, fit_note
from calibrate.llama_cpp.serve_runs import _events
from calibrate.llama_cpp.server import ServerConfig, completion_body, parse_completion
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.ngram_lookup import NgramSimple
from specsim.errors import SpecsimError
from tests.test_llama_cpp_pricing import llama_like_profile

DATA = Path(__file__).parent / "data" / "llama_cpp"
ROOT = Path(__file__).resolve().parent.parent


def test_llama_bench_records_become_passes():
    gen = parse_bench_jsonl((DATA / "llama_bench_gen.jsonl").read_text())
    assert len(gen) == 1 and gen[0].rows == 1 and gen[0].forwards == 2 and gen[0].depth_tokens == 8
    assert len(gen[0].pass_ms) == 2 and all(ms > 0 for ms in gen[0].pass_ms)
    assert gen[0].context_tokens == 8.5 and gen[0].threads == 2 and gen[0].commit
    prompt = parse_bench_jsonl((DATA / "llama_bench_prompt.jsonl").read_text())
    assert prompt[0].rows == 3 and prompt[0].forwards == 1
    with pytest.raises(SpecsimError, match="no JSON records"):
        parse_bench_jsonl("llama-bench: error: no model\n")


def test_llama_batched_bench_records_amid_its_log():
    recs = parse_batched_jsonl((DATA / "batched_bench.txt").read_text())
    assert [r.sequences for r in recs] == [1, 2]
    assert all(r.prompt_tokens == 8 and r.steps == 2 and r.step_ms > 0 for r in recs)


def test_version_and_build_flags():
    version, commit, compiler = parse_version((DATA / "server_version.txt").read_text())
    assert commit and version.endswith(f"commit {commit})") and compiler
    flags = parse_cmake_cache((DATA / "CMakeCache.txt").read_text())
    assert flags.get("CMAKE_BUILD_TYPE") == "Release" and "GGML_CUDA" not in flags
    with pytest.raises(SpecsimError, match="version"):
        parse_version("llama-server: command not found")
    # upstream's own spelling (common/arg.cpp: 'version: %d (%s)', 'built with %s for %s') was refused
    upstream = parse_version("version: 4567 (abcdef1)\nbuilt with cc (GCC) 12.2.0 for x86_64-linux-gnu")
    assert upstream == ("4567 (abcdef1)", "abcdef1", "cc (GCC) 12.2.0 for x86_64-linux-gnu")


def test_a_binary_that_does_not_answer_its_version_is_one_line(tmp_path, monkeypatch):
    """--version hanging past the 60 s timeout gave a TimeoutExpired traceback (exit 1)."""
    import subprocess

    from calibrate.llama_cpp import binaries

    for name in binaries.BINARIES:
        (tmp_path / name).write_text("#!/bin/sh\n")

    def hangs(*a, **k):
        raise subprocess.TimeoutExpired(a[0], 60)

    monkeypatch.setattr(binaries.subprocess, "run", hangs)
    with pytest.raises(SpecsimError, match="--version did not answer within 60 s"):
        find_llama_cpp(str(tmp_path))


def test_a_completion_and_its_stream():
    c = parse_completion(json.loads((DATA / "completion_sd.json").read_text()))
    assert c.predicted_n == 6 and len(c.tokens) == 6 and c.draft_n >= c.draft_accepted >= 0
    assert c.decode_steps == 5 - c.draft_accepted
    raw = (DATA / "stream_raw.http").read_bytes()
    body = raw.split(b"\r\n\r\n", 1)[1]

    async def read():
        reader = asyncio.StreamReader()
        reader.feed_data(body)
        reader.feed_eof()
        return [e async for e in _events(reader)]

    events = asyncio.run(read())
    assert sum(len(e.get("tokens") or ()) for e in events) == 4 and events[-1]["stop"]
    with pytest.raises(SpecsimError, match="timings"):
        parse_completion({"content": "hi"})


def test_server_flags_are_todays_spelling():
    args = ServerConfig("t.gguf", 2, draft="d.gguf", spec_type="draft-simple", draft_max=3).args()
    joined = " ".join(args)
    assert "--spec-draft-n-max 3" in joined and "-md d.gguf" in joined and "-t 2" in joined
    assert "--draft-max" not in joined and "--draft-min" not in joined  # removed from llama.cpp
    ngram = ServerConfig("t.gguf", 1, spec_type="ngram-simple", ngram_n=3, ngram_m=6).args()
    assert "--spec-ngram-simple-size-m" in ngram and "-md" not in ngram
    images = " ".join(ServerConfig("t.gguf", 1, mmproj="m.gguf").args())
    assert "--mmproj" not in args and "--mmproj m.gguf" in images
    body = completion_body([1, 2], 8)
    assert body["temperature"] == 0 and body["ignore_eos"] and not body["cache_prompt"]
    image = {"prompt_string": "a <__media__> b", "multimodal_data": ["AA=="]}
    assert completion_body(image, 8)["prompt"] == image and completion_body(image, 8)["ignore_eos"]


def test_llama_servers_schedule_caps_the_last_blocks():
    assert bt.schedule(3, 3, 10) == [(3, 3, 4), (3, 3, 4), (0, 0, 1)]
    assert bt.schedule(3, 0, 5) == [(3, 0, 1), (2, 0, 1), (1, 0, 1), (0, 0, 1)]
    assert bt.synthetic_rates(3, 1) == (1.0, 0.0, 0.0)
    with pytest.raises(SpecsimError):
        bt.synthetic_rates(2, 3)
    blocks = bt.blocks_of_run([0.1, 0.6, 0.6, 0.6, 0.9], 2, 2, 40)  # a block's tokens arrive together
    assert [(b.drafts, b.emitted, b.context_tokens) for b in blocks] == [(2, 3, 40), (0, 1, 43)]
    assert blocks[0].ms == pytest.approx(500.0) and blocks[1].ms == pytest.approx(300.0)


def test_the_lookup_schedule_replays_a_stream_and_refuses_another():
    prompt, kind = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], NgramSimple(2, 3)
    out = [1, 2, 3, 4, 5, 1, 2, 3]
    plan = bt.lookup_schedule(prompt, out, kind, 3)
    assert plan[0] == (3, 3, 4)
    with pytest.raises(SpecsimError, match="replayed lookup"):
        bt.lookup_schedule(prompt, [1, 9, 9, 9, 9, 9, 9, 9], kind, 3)


def test_the_block_fit_recovers_known_terms():
    cost = GridPassCost.request(llama_like_profile().latency)
    rng = np.random.default_rng(1)
    samples = []
    for g in (1, 3, 6):
        for e in (1, g + 1):
            s = bt.BlockSample(g, g, e - 1, e, int(rng.integers(40, 150)), 0.0)
            samples.append(replace(s, ms=bt.forward_ms(cost, s) + 7.0 + 2.5 * g + 4.0 * e))
    step = bt.BlockSample(0, 0, 0, 1, 60, 0.0)
    samples.append(replace(step, ms=bt.forward_ms(cost, step) + 9.0))
    fit = bt.fit_block_terms(samples, cost)
    assert (fit.per_block_ms, fit.per_draft_ms, fit.per_token_ms) == pytest.approx((7.0, 2.5, 4.0))
    assert fit.per_step_ms == pytest.approx(9.0) and fit.rms_ms < 1e-6
    assert dict(fit.per_gamma_ms) == pytest.approx({1: 9.5, 3: 14.5, 6: 22.0})
    with pytest.raises(SpecsimError, match="two draft counts"):
        bt.fit_block_terms(samples[:2], cost)


def test_the_lookup_fit_holds_the_per_token_term_and_recovers_its_line():
    """n-gram blocks (no draft forwards) at o₀ = 5, o_g = 1.5 ms with 2 ms per emitted token held."""
    cost = GridPassCost(llama_like_profile().latency.forward_costs(), drafter="lookup")
    samples = []
    for g, e in ((1, 1), (2, 3), (4, 2), (5, 6)):
        s = bt.BlockSample(g, g, e - 1, e, 80, 0.0)
        samples.append(replace(s, ms=bt.forward_ms(cost, s) + 5.0 + 1.5 * g + 2.0 * e))
    samples.append(bt.BlockSample(0, 0, 0, 1, 80, 999.0))
    fit = fit_lookup(samples, cost, 2.0)
    assert (fit.per_block_ms, fit.per_draft_ms, fit.per_token_ms) == pytest.approx((5.0, 1.5, 2.0))
    assert fit.rms_ms < 1e-6 and (fit.blocks, fit.steps) == (4, 0)


def test_each_gamma_is_priced_at_its_own_median_residual():
    """Residuals that are no line in γ (here 40, 20, 70 ms) and one host stall: each γ keeps its median,
    the γ between measured ones is interpolated, and the per-token work the profile prices is taken out."""
    cost = GridPassCost.request(llama_like_profile().latency)
    own = {1: 40.0, 3: 20.0, 6: 70.0}
    samples, extra = [bt.BlockSample(0, 0, 0, 1, 60, 0.0)], {}
    for g, o in own.items():
        for e in (1, g + 1):
            for k in range(5):
                s = bt.BlockSample(g, g, e - 1, e, 50 + 10 * k, 0.0)
                extra[len(samples)] = o + 3.0 * e + 0.1 * k + (900.0 if (g, e, k) == (1, 1, 2) else 0.0)
                samples.append(replace(s, ms=bt.forward_ms(cost, s) + extra[len(samples)]))
    fit = bt.fit_block_terms(samples, cost)
    assert fit.per_token_ms == pytest.approx(3.0, abs=0.05)  # the stall moves one cell's median by 0.1 ms
    got = dict(fit.per_gamma_ms)
    for g, o in own.items():
        mine = [x - fit.per_token_ms * samples[i].emitted for i, x in extra.items() if samples[i].gamma == g]
        assert got[g] == pytest.approx(float(np.median(mine)))
        assert abs(got[g] - o) < 0.5
    assert fit.block_ms([1, 2, 3, 9]) == pytest.approx([got[1], (got[1] + got[3]) / 2, got[3], got[6]])
    linear = replace(fit, per_gamma_ms=())
    assert linear.block_ms(2) == pytest.approx(fit.per_block_ms + 2 * fit.per_draft_ms)
    one_each = [s for s in samples if (s.gamma, s.emitted) in {(0, 1), (1, 1), (3, 4)}]
    with pytest.raises(SpecsimError, match="two emitted counts at one gamma"):
        bt.fit_block_terms(one_each, cost)


def test_a_real_runs_blocks_are_spread_evenly():
    run = bt.RunSample(gamma=4, prompt_tokens=40, tokens=21, drafted=17, accepted=16, ms=0.0)
    blocks = bt.run_blocks(run)
    assert run.blocks == 5 and [b.drafts for b in blocks] == [4, 4, 3, 3, 3]
    assert [b.context_tokens for b in blocks] == [40, 44, 48, 52, 56]
    with pytest.raises(SpecsimError, match="0 tokens after the prompt pass, no block"):
        bt.run_residual_ms(None, replace(run, tokens=0, drafted=0, accepted=0), 3.0)


def test_real_acceptance_runs_price_each_gamma_where_given():
    """Synthetic blocks give o_e = 3 ms a token; real runs at γ 2 (30 ms, twice, and one 400 ms stall) and
    γ 5 (−10 ms) beyond their forwards and o_e price those γ, not the synthetic blocks' 50 ms."""
    cost = GridPassCost.request(llama_like_profile().latency)
    samples = [bt.BlockSample(0, 0, 0, 1, 60, 0.0)]
    for g in (2, 5):
        for e in (1, g + 1):
            s = bt.BlockSample(g, g, e - 1, e, 60, 0.0)
            samples.append(replace(s, ms=bt.forward_ms(cost, s) + 50.0 + 3.0 * e))
    runs = []
    for g, level, drafted, accepted in (
        (2, 30.0, 30, 24),
        (2, 30.0, 31, 22),
        (2, 400.0, 30, 24),
        (5, -10.0, 50, 40),
    ):
        run = bt.RunSample(g, 50, 63, drafted, accepted, 0.0)
        forwards = sum(bt.forward_ms(cost, b) for b in bt.run_blocks(run))
        runs.append(replace(run, ms=forwards + level * run.blocks + 3.0 * run.tokens))
    assert bt.run_residual_ms(cost, runs[0], 3.0) == pytest.approx(30.0)
    fit = bt.fit_block_terms(samples, cost, tuple(runs))
    assert fit.per_token_ms == pytest.approx(3.0) and fit.real_runs == 4
    assert dict(fit.per_gamma_ms) == pytest.approx({2: 30.0, 5: -10.0})
    assert dict(bt.fit_block_terms(samples, cost).per_gamma_ms) == pytest.approx({2: 50.0, 5: 50.0})
    assert "4 real-acceptance runs on held-out prompts rust-struct, py-unit-test" in fit_note(
        fit, None, ("rust-struct", "py-unit-test")
    )
    assert "median ms per block, synthetic blocks" in fit_note(bt.fit_block_terms(samples, cost), None)


def test_real_runs_pair_a_target_only_run_with_every_draft_run(monkeypatch):
    """Every real-acceptance run comes just after a target-only run of the same prompt, so the step is
    sampled as often as the blocks and at the same moments; without a target-only server, the draft runs
    alone."""
    calls = []

    def fake(server, tokens, n, threads):
        calls.append((server, tuple(tokens)))
        drafted = 0 if server == "plain" else 10
        timings = {"prompt_n": 5, "prompt_ms": 9.0, "predicted_n": n, "predicted_ms": 100.0}
        timings |= {"draft_n": drafted, "draft_n_accepted": drafted // 2}
        return parse_completion({"tokens": [1] * n, "timings": timings})

    monkeypatch.setattr(bt, "timed_completion", fake)
    servers = {0: "plain", 3: "sd3", 1: "sd1"}
    runs = bt.measure_real_runs(servers, [[7], [8]], 16, 2, 2)
    order = [(s, t[0]) for s, t in calls]
    one_round = [("plain", 7), ("sd1", 7), ("plain", 8), ("sd1", 8), ("plain", 7), ("sd3", 7), ("plain", 8)]
    assert order == (one_round + [("sd3", 8)]) * 2
    assert [r.gamma for r in runs[:4]] == [0, 1, 0, 1] and sum(r.gamma == 0 for r in runs) == 8
    assert runs[1].drafted == 10 and runs[1].tokens == 15 and runs[0].drafted == 0
    calls.clear()
    assert [r.gamma for r in bt.measure_real_runs({2: "sd2"}, [[7]], 16, 1, 2)] == [2]


def test_the_target_only_step_keeps_its_sign_and_never_reaches_zero():
    """A step faster than llama-bench's Tp (host drift between stages) is written as measured, not as 0;
    one that would price a step at or below zero is one line before anything is written."""
    model = llama_like_profile().latency.cost_model
    tp = float(model.target_decode.values().min())
    for step in (-5.4, 3.0):
        checked = bt.checked_calibration(replace(model, overhead_ms_per_target_step=step))
        assert checked.overhead_ms_per_target_step == step
    wanted = r"target-only step: expected > -.* \(the target's fastest decode step, ms\).* calibrate again"
    with pytest.raises(SpecsimError, match=wanted):
        bt.checked_calibration(replace(model, overhead_ms_per_target_step=-tp))


def test_each_gammas_real_blocks_and_the_lookups_keep_their_sign_and_never_reach_their_verification():
    """Real blocks under llama-bench's forwards (host drift between stages) are written as measured, not as
    0 (a calibration's -56 to -130 ms were); one at or below minus its cheapest verification, the draft
    model's or the n-gram lookup's, is one line."""
    model = llama_like_profile().latency.cost_model
    terms = bt.BlockTerms(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, ((1, -56.0), (3, 12.0)))
    grid = bt.overhead_grid(terms, range(1, 5))
    assert [m for (m,) in grid.ms] == pytest.approx([-56.0, -22.0, 12.0, 12.0])
    assert (grid.gamma, grid.batch) == ((1, 2, 3, 4), (1,))
    assert bt.checked_calibration(replace(model, overhead_ms_per_block=grid)).overhead_ms_per_block == grid
    floor = float(model.target_verify.values()[list(model.target_verify.rows).index(2)].min())  # γ 1: 2 rows
    low = bt.overhead_grid(replace(terms, per_gamma_ms=((1, -floor), (3, 0.0))), range(1, 4))
    with pytest.raises(SpecsimError, match=r"block terms: expected > -.* at gamma 1 .* calibrate again"):
        bt.checked_calibration(replace(model, overhead_ms_per_block=low))
    with pytest.raises(SpecsimError, match=r"\(n-gram lookup\): expected > -.* at gamma 1 .* calibrate"):
        bt.checked_calibration(replace(model, lookup_overhead_ms_per_block=low))


def test_refit_reads_the_kept_records_and_runs_nothing(tmp_path):
    """--refit's stages come from a finished calibration's records: missing or of another key is one line,
    a stage they lack is refused rather than timed, a stage they hold is read without running."""
    from calibrate.llama_cpp import latency

    path, key = tmp_path / "p.json.llama-latency.records.json", {"plan": "a"}
    with pytest.raises(SpecsimError, match="--refit: .*: not found"):
        latency.Stages.open(path, key, kept=True)
    path.write_text(json.dumps({"key": {"plan": "b"}, "done": {}, "seconds": {}}))
    with pytest.raises(SpecsimError, match="records of another plan"):
        latency.Stages.open(path, key, kept=True)
    step = asdict(bt.BlockSample(0, 0, 0, 1, 60, 9.0))
    path.write_text(json.dumps({"key": key, "done": {"blocks": [step]}, "seconds": {"blocks": 1.0}}))
    stages = latency.Stages.open(path, key, kept=True)

    def run():
        raise AssertionError("a refit timed a stage")

    assert latency._stage(stages, "blocks", run, bt.BlockSample) == [bt.BlockSample(0, 0, 0, 1, 60, 9.0)]
    with pytest.raises(SpecsimError, match="has no 'real blocks' stage"):
        latency._stage(stages, "real blocks", run, bt.RunSample)
    assert latency.Stages.open(path, {"plan": "c"}).done == {}  # a new calibration measures


def test_target_only_real_runs_price_the_step_instead_of_the_streamed_ones():
    """Target-only runs (γ 0, not streamed) 4 ms a step beyond Tp at their contexts, and one 50 ms stall,
    price the step at their median, not the streamed steps' 9 ms; the γ's blocks ignore them."""
    cost = GridPassCost.request(llama_like_profile().latency)
    step = bt.BlockSample(0, 0, 0, 1, 60, 0.0)
    samples = [replace(step, ms=bt.forward_ms(cost, step) + 9.0)]
    for g in (2, 4):
        for e in (1, g + 1):
            s = bt.BlockSample(g, g, e - 1, e, 60, 0.0)
            samples.append(replace(s, ms=bt.forward_ms(cost, s) + 20.0))
    runs = []
    for level in (4.0, 4.0, 50.0):
        run = bt.RunSample(0, 45, 63, 0, 0, 0.0)
        forwards = sum(bt.forward_ms(cost, b) for b in bt.run_blocks(run))  # Tp at each step's context
        runs.append(replace(run, ms=forwards + level * run.tokens))
    fit = bt.fit_block_terms(samples, cost, tuple(runs))
    assert fit.per_step_ms == pytest.approx(4.0) and (fit.real_steps, fit.real_runs) == (3, 0)
    assert dict(fit.per_gamma_ms) == pytest.approx({2: 20.0, 4: 20.0})  # the synthetic blocks' medians
    assert bt.fit_block_terms(samples, cost).per_step_ms == pytest.approx(9.0)
    note = fit_note(fit, None, ("rust-struct", "py-unit-test"))
    assert "4.0 ms per target-only step (3 target-only runs on held-out prompts rust-struct" in note


def test_cpu_share_and_starvation():
    with CpuShare() as share:
        sum(i * i for i in range(200_000))
    assert share.seconds > 0 and share.ours >= 0 and share.foreign >= 0
    assert starved(replace(share, seconds=1.0, ours=0.5), 1) and not starved(
        replace(share, seconds=1.0, ours=1.9), 2
    )


def test_a_build_folder_is_checked_before_anything_runs(tmp_path):
    with pytest.raises(SpecsimError, match="is not a folder"):
        find_llama_cpp(str(tmp_path / "nowhere"))
    (tmp_path / "llama-server").write_text("")
    with pytest.raises(SpecsimError, match="llama-bench"):
        find_llama_cpp(str(tmp_path))


# check --runtime llama.cpp --serve-rates on the shipped profile: the bad-option cases below add to it
LLAMA_SERVE_CHECK = [
    "check",
    "--runtime",
    "llama.cpp",
    "--threads",
    "2",
    "--profile",
    "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu",
    "--gamma",
    "3",
    "--serve-rates",
    "1",
]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "--runtime", "llama.cpp", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu-xeon"], "--threads"),
        (
            [
                "check",
                "--runtime",
                "llama.cpp",
                "--threads",
                "2",
                "--profile",
                "qwen2.5-coder-0.5b-1.5b-cpu-xeon",
                "--no-write",
            ],
            "not llama.cpp's",
        ),
        (
            [
                "calibrate",
                "latency",
                "--engine",
                "llama.cpp",
                "--threads",
                "2",
                "--renice",
                "5",
                "--out",
                "x.json",
            ],
            "--renice",
        ),
        (
            [
                "calibrate",
                "latency",
                "--engine",
                "llama.cpp",
                "--threads",
                "2",
                "--ngram",
                "ngram-mod",
                "--out",
                "x.json",
            ],
            "--ngram",
        ),
        (
            [
                "calibrate",
                "latency",
                "--engine",
                "llama.cpp",
                "--threads",
                "2",
                "--llama-cpp",
                "/nowhere",
                "--preset",
                "qwen2.5-coder-0.5b-1.5b",
                "--out",
                "x.json",
            ],
            "--llama-cpp",
        ),
        (
            [
                "calibrate",
                "acceptance",
                "--engine",
                "llama.cpp",
                "--threads",
                "2",
                "--method",
                "M",
                "--out",
                "x.json",
            ],
            "--method",
        ),
        (
            [*LLAMA_SERVE_CHECK, "--ngram", "ngram-simple:3,6", "--no-write"],
            "--ngram: applies one request at a time",
        ),
        ([*LLAMA_SERVE_CHECK, "--remeasure", "--no-write"], "--remeasure: applies one request at a time"),
        (
            [*LLAMA_SERVE_CHECK[:-2], "--remeasure", "--limit", "15", "--no-write"],
            "--remeasure: the held-out prompts are reference's last 2; expected --limit <= 14",
        ),
        (
            ["check", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu-xeon", "--remeasure", "--no-write"],
            "--remeasure: applies with --runtime llama.cpp",
        ),
        (
            [*LLAMA_SERVE_CHECK, "--min-rounds", "4", "--max-rounds", "3", "--no-write"],
            "--min-rounds/--max-rounds: expected 1 <= min <= max, got 4 and 3",
        ),
        (
            ["calibrate", "latency", "--engine", "llama.cpp", "--threads", "2", "--refit", "--out", "x.json"],
            "--refit: no records at x.json.llama-latency.records.json",
        ),
        (["calibrate", "latency", "--refit", "--out", "x.json"], "--refit: refits llama.cpp's kept records"),
        (
            [
                "check",
                "--profile",
                "qwen2.5-coder-0.5b-1.5b-cpu-xeon",
                "--ngram",
                "ngram-simple:3,6",
                "--no-write",
            ],
            "--ngram: applies with --runtime llama.cpp",
        ),
        (
            ["calibrate", "latency", "--renice", "-5", "--out", "x.json"],
            "--renice: applies with --engine llama.cpp",
        ),
        (
            ["calibrate", "acceptance", "--llama-cpp", "/tmp", "--out", "x.json"],
            "--llama-cpp: applies with --engine llama.cpp",
        ),
    ],
)
def test_bad_llama_cpp_options_are_one_line(argv, message, tmp_path):
    code = "import sys; from specsim.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr


def test_batched_only_takes_the_request_gammas_default(monkeypatch, tmp_path):
    """``--request-batches`` without ``--request-gammas`` sizes llama-server's batched grids at the default
    gammas (it raised a TypeError before the fix)."""
    from calibrate.cli import llama_cpp_handlers
    from calibrate.cli.latency_checks import REQUEST_DEFAULTS
    from calibrate.llama_cpp import latency
    from specsim.cli.main import main

    seen = {}

    def add_batched(path, llama, target, draft, serve):
        seen["serve"] = serve
        return path, 1.0

    monkeypatch.setattr(
        llama_cpp_handlers, "setup_from_args", lambda args, prompts_limit: (None,) * 5 + ("",)
    )
    monkeypatch.setattr(latency, "add_batched", add_batched)
    out = tmp_path / "p.json"
    argv = ["calibrate", "latency", "--engine", "llama.cpp", "--threads", "2", "--request-batches", "4,1,2"]
    assert main([*argv, "--batched-only", "--out", str(out)]) == 0
    assert seen["serve"].batches == (1, 2, 4)
    assert seen["serve"].gammas == tuple(REQUEST_DEFAULTS["request_gammas"])


def test_the_serving_check_takes_the_serving_defaults(monkeypatch):
    """``check --runtime llama.cpp --serve-rates`` without ``--serve-requests``/``--max-num-seqs`` serves at
    their defaults, as the transformers check does (the slots check raised a TypeError on None before the
    fix)."""
    from calibrate.cli import llama_cpp_handlers, llama_cpp_serve
    from calibrate.cli.check_request import SERVE_DEFAULTS
    from specsim.cli.main import main

    seen = {}

    def serve(args, *rest):
        seen.update(serve_requests=args.serve_requests, max_num_seqs=args.max_num_seqs)
        return 0

    monkeypatch.setattr(llama_cpp_serve, "cmd_serve_llama", serve)
    monkeypatch.setattr(llama_cpp_serve, "check_slots", lambda profile, slots: None)  # its grids stop at 4
    no_models = lambda args, prompts_limit: (None,) * 5 + ("",)  # noqa: E731
    monkeypatch.setattr(llama_cpp_handlers, "setup_from_args", no_models)
    profile = "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu"
    argv = ["check", "--runtime", "llama.cpp", "--profile", profile, "--threads", "2", "--gamma", "3"]
    assert main([*argv, "--serve-rates", "1", "--no-write"]) == 0
    assert seen == SERVE_DEFAULTS


def _zoo_images_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo_images", ROOT / "bench" / "llama_cpp_zoo_images.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_zoo_image_requests_carry_one_marker_per_image():
    """``bench/llama_cpp_zoo_images.py`` sends every ``zoo`` prompt with llama-server's media marker where
    each image goes and the images as base64, and counts agreed tokens up to the first difference."""
    bench = _zoo_images_bench()
    requests = bench.zoo_requests(None)
    assert len(requests) == 36 and sorted({r["images"] for r in requests}) == [1, 2, 5]
    for r in requests:
        prompt = r["prompt"]
        assert prompt["prompt_string"].count(bench.MARKER) == r["images"] == len(prompt["multimodal_data"])
        assert "<image>" not in prompt["prompt_string"]
        assert base64.b64decode(prompt["multimodal_data"][0])[:4] == b"\x89PNG"
    assert bench._agreed([1, 2, 3, 4], [1, 2, 5, 4]) == 2 and bench._agreed([1, 2], [1, 2, 3]) == 2


def test_the_zoo_image_table_sets_each_replayed_tau_against_llama_cpps():
    """llama.cpp's τ from its counts ((n − 1) tokens over n − 1 − accepted blocks; 2.0 here in every group),
    each method's τ replayed from ``zoo-cpu``'s traces at γ, its signed error, and the summary by method."""
    from specsim.acceptance.replay import replay_traces_tau
    from specsim.profiles import load_profile

    bench, profile = _zoo_images_bench(), load_profile("zoo-cpu")
    requests = bench.zoo_requests(None)
    traces = {t.prompt_id: t.tokens for a in profile.acceptance if a.method == "M" for t in a.traces}
    target = {r["id"]: parse_completion(_completion(65, traces[r["id"]])) for r in requests}
    sd = {r["id"]: parse_completion(_completion(65, (), draft_n=40, draft_n_accepted=32)) for r in requests}
    lines = bench.compare(requests, target, {2: sd, 4: sd}, profile)
    assert len(lines) == 1 + 2 * 3 + 3 and lines[0].split()[:2] == ["gamma", "images"]
    row = lines[1 + 3 + 1].split()  # gamma 4, two images
    agreed, total = row[3].split("/")  # the target's tokens are the traces': all agree
    assert row[:3] == ["4", "2", "12"] and agreed == total and row[4] == "2.00"
    z = replay_traces_tau(profile.one_entry("Z", "zoo-2img").traces, 4)
    assert row[5] == f"{z:.2f}" and row[6] == f"{z / 2 - 1:+.1%}"
    assert lines[-3].startswith("Z: median |err|") and lines[-3].endswith("over 6 rows")


def _completion(n: int, tokens, **timings) -> dict:
    return {"tokens": list(tokens), "timings": {"prompt_n": 40, "prompt_ms": 1.0, "predicted_n": n,
                                                "predicted_ms": 100.0, **timings}}  # fmt: skip


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--temperature", "0.7"], "--temperature"),
        (["--seeds", "3"], "--seeds"),
        (["--batch", "2"], "--batch"),
        (["--tree", "4,2,1"], "--tree"),
        (["--policy", "heuristic:4"], "--policy"),
        (["--synthetic-acceptance", "tau:2@3"], "--synthetic-acceptance"),
        (["--method", "M"], "--method"),
        (["--device", "cuda"], "--device"),
        (["--max-new-tokens", "1"], "--max-new-tokens"),
    ],
)
def test_check_with_llama_cpp_refuses_what_only_this_project_s_engines_run(capsys, extra, flag):
    """These were ignored and llama-server started: a sampled, batched or tree check asked for would have run
    (and been written) as a greedy one-request check."""
    from specsim.cli.main import main

    argv = ["check", "--runtime", "llama.cpp", "--threads", "2"]
    assert main([*argv, "--profile", "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu", *extra, "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim: error: {flag}: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    "command, extra, flag",
    [
        ("latency", ["--tree", "4,2,1"], "--tree"),
        ("latency", ["--device", "cuda"], "--device"),
        ("latency", ["--max-repeats", "3"], "--max-repeats"),
        ("latency", ["--target-config", "zoo:target"], "--target-config"),
        ("acceptance", ["--sample-paths", "4"], "--sample-paths"),
        ("acceptance", ["--top-k", "4"], "--top-k"),
        ("acceptance", ["--temperature", "0.5"], "--temperature"),
        # read by this project's engines only: llama.cpp's calibration resumes, prints text, seeds nothing
        ("latency", ["--no-resume"], "--no-resume"),
        ("latency", ["--json"], "--json"),
        ("latency", ["--seed", "3"], "--seed"),
        ("latency", ["--max-new-tokens", "5"], "--max-new-tokens"),
        ("acceptance", ["--json"], "--json"),
        ("acceptance", ["--restart"], "--restart"),
        ("acceptance", ["--caption-prefix", "Pic: "], "--caption-prefix"),
    ],
)
def test_calibrate_with_llama_cpp_refuses_what_only_this_project_s_engines_run(
    tmp_path, capsys, command, extra, flag
):
    """Ignored before, with llama.cpp's binaries started: a tree grid, a device or sampled paths asked for
    were simply not measured."""
    from specsim.cli.main import main

    argv = [
        "calibrate",
        command,
        "--engine",
        "llama.cpp",
        "--threads",
        "2",
        "--out",
        str(tmp_path / "p.json"),
    ]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"specsim: error: {flag}: does not apply with --engine llama.cpp")
        and err.count("\n") == 1
    )
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("extra", [["--max-num-seqs", "4"], ["--serve-requests", "8"], ["--seed", "3"]])
def test_a_one_request_llama_cpp_check_refuses_serving_flags(tmp_path, capsys, extra):
    """Without --serve-rates, llama.cpp's check runs one request at a time: these were read by nothing (this
    project's engines refuse the first two there)."""
    from specsim.cli.main import main

    argv = ["check", "--runtime", "llama.cpp", "--profile", "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu-check"]
    assert main([*argv, "--threads", "2", "--no-write", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim: error: {extra[0]}: applies with --serve-rates") and err.count("\n") == 1
