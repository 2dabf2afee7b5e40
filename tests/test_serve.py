"""specsim serve: a hand-computed schedule, arrivals, SD off = target-only, metrics, roofline pricing, CLI."""

import json

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.draft_shapes.policies import GammaPolicy, parse_batch_ranges
from specsim.errors import SpecsimError
from specsim.serve.arrivals import Requests, gamma_arrivals, poisson_arrivals, read_trace, uniform_requests
from specsim.serve.compare import TARGET_ONLY
from specsim.serve.metrics import Slo, itl_percentiles, parse_slo, per_request_ms, summarize
from specsim.serve.scheduler import SchedulerConfig, schedule_step
from specsim.serve.simulator import simulate
from specsim.serve.speculation import IidAcceptance, ReplayAcceptance
from specsim.serve.step_cost import ConstantStepCost

# --------------------------------------------------------------------------- the hand-computed schedule
# step ms = 10 + 1 per verify row (B·(γ+1)) + 0.1 per prefill token + 2 per draft pass (γ of them when B > 0)
HAND_COST = ConstantStepCost(
    target_ms=10.0, target_ms_per_row=1.0, prefill_ms_per_token=0.1, draft_ms_per_pass=2.0
)
HAND_REQUESTS = Requests(
    arrival_s=np.array([0.000, 0.005, 0.010]),
    prompt_tokens=np.array([60, 80, 20]),
    images=np.array([0, 0, 0]),
    output_tokens=np.array([4, 3, 2]),
)
# Greedy match traces, one per request (position t = tokens already emitted; t = 0 is the prefill's token).
HAND_TRACES = [[1, 1, 0, 1, 1, 1], [1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]


def _hand_run(cost=HAND_COST):
    return simulate(
        HAND_REQUESTS,
        cost=cost,
        policy=GammaPolicy(2),
        acceptance=ReplayAcceptance.from_matches(HAND_TRACES),
        rng=np.random.default_rng(0),
        scheduler=SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=50),
        record=True,
    )


def test_hand_computed_schedule_is_reproduced_exactly():
    # Budget 50 tokens/step, at most 2 running, γ = 2 (3 verify rows per decode).
    # step 1, t=0:     R0 arrived; admit R0, chunk 0..50.            10 + 0.1*50          = 15 ms -> 0.015
    # step 2, t=.015:  R1, R2 arrived; R0 chunk 50..60 (10), admit R1 chunk 0..40 (40; room for 1 only)
    #                                                                10 + 0.1*50          = 15 ms -> 0.030
    #                  R0's prompt is cached: its first token at 0.030 (TTFT 30 ms)
    # step 3, t=.030:  decode R0 (3 rows; trace0 from t=1: 1,0 -> accepts 1, emits 2); R1 chunk 40..80
    #                                                                10 + 3 + 0.1*40 + 2*2 = 21 ms -> 0.051
    #                  R1's first token at 0.051 (TTFT 46 ms)
    # step 4, t=.051:  decode R0 (t=3: 1,1 -> 2 accepted, 1 token left: emits 1, done), R1 (t=1: 0 -> emits 1)
    #                                                                10 + 6 + 2*2          = 20 ms -> 0.071
    # step 5, t=.071:  decode R1 (t=2: 1,1 -> 2 accepted, emits its last 1, done); admit R2, chunk 0..20
    #                                                                10 + 3 + 0.1*20 + 4   = 19 ms -> 0.090
    #                  R2's first token at 0.090 (TTFT 80 ms)
    # step 6, t=.090:  decode R2 (t=1: 1,1 -> 2 accepted, emits its last 1, done)
    #                                                                10 + 3 + 4            = 17 ms -> 0.107
    run = _hand_run()
    log = run.step_log
    assert [s.start_s for s in log] == pytest.approx([0.0, 0.015, 0.030, 0.051, 0.071, 0.090])
    assert [s.end_s for s in log] == pytest.approx([0.015, 0.030, 0.051, 0.071, 0.090, 0.107])
    assert [s.gamma for s in log] == [2] * 6
    assert [s.decode for s in log] == [(), (), (0,), (0, 1), (1,), (2,)]
    assert [s.chunks for s in log] == [
        ((0, 0, 50, 0),),
        ((0, 50, 10, 0), (1, 0, 40, 0)),
        ((1, 40, 40, 0),),
        (),
        ((2, 0, 20, 0),),
        (),
    ]
    assert [s.accepted for s in log] == [(), (), (1,), (2, 0), (2,), (2,)]
    assert [s.emitted for s in log] == [(), (), (2,), (1, 1), (1,), (1,)]
    assert run.token_times_s(0) == pytest.approx([0.030, 0.051, 0.051, 0.071])
    assert run.token_times_s(1) == pytest.approx([0.051, 0.071, 0.090])
    assert run.token_times_s(2) == pytest.approx([0.090, 0.107])
    ttft, tpot, e2e = per_request_ms(run)
    assert ttft == pytest.approx([30.0, 46.0, 80.0])
    assert e2e == pytest.approx([71.0, 85.0, 97.0])
    assert tpot == pytest.approx([41.0 / 3, 39.0 / 2, 17.0])
    # ITL gaps: R0 21, 0 (its 2nd token of step 3), 20; R1 20, 19; R2 17
    assert sorted(run.itl_gaps_ms.tolist()) == pytest.approx([17.0, 19.0, 20.0, 20.0, 21.0])
    assert run.itl_zero_tokens == 1
    # vLLM counters: 5 blocks of 2 drafts, 1 + 2 + 0 + 2 + 2 = 7 accepted
    assert (run.sd_blocks, run.draft_tokens, run.accepted_tokens) == (5, 10, 7)


def test_goodput_counts_requests_meeting_every_bound():
    m = summarize(_hand_run(), parse_slo("ttft=50,tpot=18"))
    # TTFT 30, 46, 80 -> R0, R1; TPOT 13.7, 19.5, 17 -> R0, R2: only R0 meets both, over 0.107 s
    assert m.goodput_requests_per_s == pytest.approx(1 / 0.107)
    assert m.slo_met_fraction == pytest.approx(1 / 3)
    assert m.output_tokens_per_s == pytest.approx(9 / 0.107)
    assert m.mean_acceptance_length == pytest.approx(1 + 7 / 5)
    assert summarize(_hand_run(), Slo(e2e_ms=90.0)).slo_met_fraction == pytest.approx(2 / 3)


def test_encoder_budget_cuts_a_chunk_before_the_image_it_cannot_encode():
    # Two images of 10 positions first, then 5 text tokens; the encoder takes one image per step.
    cfg = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=100, encoder_budget_tokens=10)
    kw = dict(prompt_total=np.array([25]), images=np.array([2]), image_tokens=10, gamma=0)
    none = np.empty(0, dtype=np.int64)
    first = schedule_step(
        cfg, decoding=none, prefilling=none, waiting=range(0, 1), computed=np.array([0]), **kw
    )
    assert first.chunks == ((0, 0, 10, 1),)  # image 1 only
    second = schedule_step(
        cfg, decoding=none, prefilling=np.array([0]), waiting=range(1, 1), computed=np.array([10]), **kw
    )
    assert second.chunks == ((0, 10, 15, 1),)  # image 2 and the text


def test_images_fill_prompt_positions_and_pay_the_encoder():
    cost = ConstantStepCost(
        target_ms=10.0, prefill_ms_per_token=0.1, encoder_ms_per_image=3.0, image_tokens_per_image=10
    )
    req = uniform_requests([0.0], prompt_tokens=5, images=2, output_tokens=1)
    run = simulate(
        req,
        cost=cost,
        policy=TARGET_ONLY,
        acceptance=None,
        rng=np.random.default_rng(0),
        scheduler=SchedulerConfig(encoder_budget_tokens=10),
        record=True,
    )
    # step 1: 10 tokens + image 1: 10 + 1 + 3 = 14 ms; step 2: 15 tokens + image 2: 10 + 1.5 + 3 = 14.5 ms
    assert run.first_token_s[0] == pytest.approx(0.0285)
    assert run.finish_s[0] == pytest.approx(0.0285)


# --------------------------------------------------------------------------- arrivals
def test_poisson_arrivals_match_their_rate():
    t = poisson_arrivals(20000, 5.0, np.random.default_rng(1))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert abs(gaps.mean() - 0.2) < 4 * 0.2 / np.sqrt(gaps.size)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # exponential: CV = 1
    assert abs(20000 / t[-1] - 5.0) < 0.15


def test_gamma_arrivals_keep_the_rate_and_set_the_burstiness():
    t = gamma_arrivals(20000, 5.0, 0.25, np.random.default_rng(2))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert abs(gaps.mean() - 0.2) < 0.01
    assert abs(gaps.std() / gaps.mean() - 2.0) < 0.1  # CV = 1/sqrt(shape)
    assert np.array_equal(
        poisson_arrivals(10, 2.0, np.random.default_rng(3)),
        poisson_arrivals(10, 2.0, np.random.default_rng(3)),
    )


def test_trace_reads_and_names_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"arrival_s": 0.5, "prompt_tokens": 10, "images": 1, "output_tokens": 4}\n\n'
        '{"arrival_s": 0.7, "prompt_tokens": 3, "output_tokens": 2}\n'
    )
    req = read_trace(str(path))
    assert req.arrival_s.tolist() == [0.5, 0.7] and req.images.tolist() == [1, 0]
    path.write_text(
        '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 4}\n'
        '{"arrival_s": 0.6, "prompt_tokens": 10, "output_tokens": 0}\n'
    )
    with pytest.raises(SpecsimError, match=r"line 2\.output_tokens: expected an integer >= 1, got 0"):
        read_trace(str(path))


# --------------------------------------------------------------------------- SD on / off
def _workload(n=40, rate=20.0, seed=5):
    times = poisson_arrivals(n, rate, np.random.default_rng(seed))
    return uniform_requests(times, prompt_tokens=30, images=0, output_tokens=20)


IID = IidAcceptance(0.6)


def _run(policy, cost, acceptance=IID, **kw):
    return simulate(
        _workload(),
        cost=cost,
        policy=policy,
        acceptance=acceptance,
        rng=np.random.default_rng(9),
        scheduler=SchedulerConfig(max_num_seqs=8),
        **kw,
    )


def test_sd_off_is_target_only():
    cost = ConstantStepCost(
        target_ms=8.0,
        target_ms_per_row=0.5,
        draft_ms_per_pass=1.0,
        overhead_ms_per_step=0.3,
        prefill_ms_per_token=0.01,
    )
    off = _run(GammaPolicy(4, off_from_batch=1), cost)
    target_only = _run(TARGET_ONLY, cost)
    assert np.array_equal(off.first_token_s, target_only.first_token_s)
    assert np.array_equal(off.finish_s, target_only.finish_s)
    assert off.draft_tokens == 0 and target_only.steps == off.steps
    # target-only decoding emits exactly one token per request per step: the tokens after the first
    assert target_only.itl_zero_tokens == 0
    assert target_only.itl_gaps_ms.size == int((_workload().output_tokens - 1).sum())


def test_sd_that_never_accepts_and_costs_nothing_is_target_only():
    cost = ConstantStepCost(target_ms=8.0, prefill_ms_per_token=0.01)  # verify rows and drafts are free
    never = _run(GammaPolicy(3), cost, ReplayAcceptance.from_matches([[0]]))
    assert np.allclose(never.finish_s, _run(TARGET_ONLY, cost).finish_s)


def test_gamma_policy_schedule_and_off():
    policy = GammaPolicy(3, parse_batch_ranges("1-4:5,5-16:2"), off_from_batch=64)
    assert [policy.gamma_at(b) for b in (1, 4, 5, 16, 17, 63, 64, 200)] == [5, 5, 2, 2, 3, 3, 0, 0]
    with pytest.raises(SpecsimError, match="overlap"):
        parse_batch_ranges("1-8:3,4-9:2")


def test_iid_acceptance_mean_matches_tau():
    acc = IidAcceptance(0.7).accepted(
        np.arange(200000), np.zeros(200000, int), np.full(200000, 3), np.random.default_rng(4)
    )
    tau = (1 - 0.7**4) / 0.3
    assert abs(1 + acc.mean() - tau) < 0.01
    blocks = IidAcceptance(0.7).accepted_steps(500, 3, 400, np.random.default_rng(5))
    assert blocks.shape == (400, 500) and blocks.max() == 3
    assert abs(1 + blocks.mean() - tau) < 0.01


def test_iid_blocks_serve_as_step_by_step_draws_do():
    """i.i.d. acceptance drawn in blocks by the fast-forward path gives the acceptance rate and TPOT of the
    step-by-step path (other draws, the same distribution)."""
    times = poisson_arrivals(400, 40.0, np.random.default_rng(2))
    req = uniform_requests(times, 64, 0, 64)
    cost = ConstantStepCost(target_ms=5.0, target_ms_per_row=0.05, draft_ms_per_pass=0.5)
    runs = [
        simulate(
            req,
            cost=cost,
            policy=GammaPolicy(3),
            acceptance=IidAcceptance(0.7),
            rng=np.random.default_rng(9),
            scheduler=SchedulerConfig(max_num_seqs=16),
            record=record,
        )
        for record in (True, False)
    ]
    rates = [r.accepted_tokens / r.draft_tokens for r in runs]
    assert rates[0] == pytest.approx(rates[1], abs=0.01)
    assert rates[1] == pytest.approx((0.7 - 0.7**4) / 3 / 0.3, abs=0.01)  # E[accepted] / γ
    tpot = [summarize(r).tpot_ms.p50 for r in runs]
    assert tpot[0] == pytest.approx(tpot[1], rel=0.03)


def test_itl_percentiles_equal_numpy_on_the_expanded_multiset():
    gaps = np.random.default_rng(6).exponential(10.0, 301).astype(np.float32)
    p = itl_percentiles(gaps, 250)
    full = np.concatenate([np.zeros(250), gaps.astype(float)])
    assert [p.p50, p.p90, p.p99] == pytest.approx(np.percentile(full, [50, 90, 99]).tolist())
    assert p.mean == pytest.approx(full.mean())


# --------------------------------------------------------------------------- roofline pricing
def test_roofline_step_cost_prices_passes_as_the_planner():
    from specsim.hardware.device import load_device
    from specsim.hardware.plan_inputs import resolve_models
    from specsim.hardware.roofline import decode_ms, forward_ms, prefill_ms
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost

    _, t, d = resolve_models(pair="llava-1.5-7b-68m", target=None, draft=None)
    dev, rt = load_device("h100-sxm"), load_runtime("llama.cpp")
    cost = RooflineStepCost(t, d, dev, rt)
    ctx = np.array([1000.0, 1500.0, 2200.0])
    assert cost.target_step_ms(3, 4, ctx) == pytest.approx(forward_ms(t, dev, rt, 3, ctx.mean(), 4))
    assert cost.target_step_ms(0, 1, ctx[:0], [(700, 0)]) == pytest.approx(prefill_ms(t, dev, rt, 700))
    draft = sum(decode_ms(d, dev, rt, ctx.mean() + j, 3) for j in range(2))
    draft += rt.extra_draft_forwards_per_block * decode_ms(d, dev, rt, ctx.mean(), 3)
    assert cost.draft_ms(3, 2, ctx) == pytest.approx(draft)
    mixed = cost.target_step_ms(3, 4, ctx, [(512, 576)])
    alone = forward_ms(t, dev, rt, 3, ctx.mean(), 4) + forward_ms(t, dev, rt, 1, 576, 512, logits=1)
    assert cost.target_step_ms(3, 4, ctx) < mixed < alone  # one pass: the weights stream once
    assert cost.image_tokens_per_image == 576 and cost.kv_cache_tokens() > 10000


def test_roofline_step_cost_prices_a_moe_target_at_its_batch():
    """A MoE target's experts touched level off at E: serve extrapolated batch 1→2 linearly and priced a
    Mixtral-8x7B decode step at B 64 at 275 ms where the planner gives 26 ms. Steps, decode blocks and a
    pass carrying a prefill chunk (the experts read once, by all its rows) equal the planner's pricing."""
    from specsim.hardware.device import load_device
    from specsim.hardware.passes import pass_table, pass_terms
    from specsim.hardware.plan_inputs import resolve_models
    from specsim.hardware.roofline import forward_ms, sharded_weight_bytes
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost

    with pytest.warns(UserWarning, match="must share the target's tokenizer"):  # a cost pairing, no tokens
        _, t, d = resolve_models(pair=None, target="mixtral-8x7b", draft="llama-3.2-1b")
    dev, rt = load_device("h200"), load_runtime("vllm")
    cost = RooflineStepCost(t, d, dev, rt)
    for batch in (1, 4, 16, 64):
        ctx = np.linspace(500.0, 560.0, batch)
        for rows in (1, 4):
            want = forward_ms(t, dev, rt, batch, ctx.mean(), rows)
            assert cost.target_step_ms(batch, rows, ctx) == pytest.approx(want, rel=1e-9), (batch, rows)
        block = cost.decode_steps_ms(batch=batch, gamma=3, context_tokens=ctx[None, :])[0]
        assert block == pytest.approx(
            forward_ms(t, dev, rt, batch, ctx.mean(), 4)
            + cost.draft_ms(batch, 3, ctx)
            + cost.overhead_ms(batch, 3),
            rel=1e-9,
        )
    ctx = np.full(16, 528.0)
    parts = [pass_terms(t, dev, 16, 528.0, 1), pass_terms(t, dev, 1, 0.0, 300, logits=1)]
    merged = {k: parts[0][k] + parts[1][k] for k in ("flops", "base_bytes", "attention_flops", "kv_bytes")}
    merged = (
        parts[0] | merged | {"rows": 316.0, "score_elems": parts[0]["score_elems"] + parts[1]["score_elems"]}
    )
    merged |= {"kv_elems": parts[0]["kv_elems"] + parts[1]["kv_elems"], "masked": 1.0}
    merged["base_bytes"] += (
        sharded_weight_bytes(t, 316) - sharded_weight_bytes(t, 16) - sharded_weight_bytes(t, 300)
    )
    merged["weights"] = float(pass_terms(t, dev, 1, 0.0, 316)["weights"])
    want = float(pass_table([merged]).ms(rt)[0])
    assert cost.target_step_ms(16, 1, ctx, [(300, 0)]) == pytest.approx(want, rel=1e-9)


# --------------------------------------------------------------------------- CLI
SERVE = ["serve", "--requests", "30", "--output-tokens", "32", "--alpha", "0.7"]


def _with_requests(n: int) -> list[str]:
    """SERVE with another request count (an option is given once)."""
    i = SERVE.index("--requests")
    return [*SERVE[: i + 1], str(n), *SERVE[i + 2 :]]


def test_cli_prints_sd_on_and_off(capsys):
    assert main([*SERVE, "--rate", "4", "--slo", "ttft=500,tpot=50"]) == 0
    out = capsys.readouterr().out
    assert "target-only" in out and "TPOT p50 ms" in out and "goodput req/s" in out


def test_cli_sweep_json_names_where_sd_stops_paying(capsys):
    assert main([*SERVE, "--rates", "1,8", "--json", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["sweep"]["rows"]
    assert [r["rate_per_s"] for r in rows] == [1.0, 8.0]
    assert "sd_stops_paying_from_rate_per_s" in data["sweep"]
    assert rows[0]["sd"]["tpot_ms"]["p50"] < rows[0]["target_only"]["tpot_ms"]["p50"]


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("specsim: error: ") and captured.out == ""
    return captured.err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--rate", "0"], "--rate: expected requests per second in [1e-06, 1e+06], got '0'"),
        (["--rate", "fast"], "--rate: expected requests per second"),
        (["--rates", "1,,4"], "--rates: expected requests per second"),
        (["--rates", "2,2"], "--rates: expected distinct rates"),
        (["--slo", "ttft=abc"], "--slo: expected bounds in ms like ttft=500,tpot=50"),
        (["--slo", "latency=3"], "--slo: expected bounds in ms"),
        (["--slo", "ttft=-5"], "--slo: ttft expected a bound in ms"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens: expected an integer in 1.."),
        (["--max-num-batched-tokens", "3"], "--max-num-batched-tokens: expected at least gamma+1 = 4"),
        (["--max-num-seqs", "-1"], "--max-num-seqs: expected an integer"),
        (["--encoder-budget", "100"], "--encoder-budget: expected at least one image's 576 tokens"),
        (["--max-num-batched-tokens", "100"], "--max-num-batched-tokens: expected at least one image's 576"),
        (["--kv-cache-tokens", "50"], "--kv-cache-tokens: expected room for the longest request"),
        (["--kv-cache-tokens", "0"], "--kv-cache-tokens: expected an integer in 1..1099511627776"),
        (["--kv-cache-tokens", "16777216"], "--kv-cache-tokens: 16777216 positions, more than the"),  # 8 TiB
        (["--gamma-by-batch", "1-5000:3"], "with 1 <= lo <= hi <= 4096 and 0 <= gamma <= 1024, got 1-5000:3"),
        (["--gamma-by-batch", "1-8"], "--gamma-by-batch: expected ranges like 1-8:5,9-32:3"),
        (["--burstiness", "0"], "--burstiness: expected a Gamma shape"),
    ],
)
def test_cli_bad_inputs_exit_2_with_one_line(capsys, argv, expected):
    assert main([*SERVE, *argv]) == 2
    assert expected in _one_line(capsys)


def test_a_gamma_no_step_takes_is_refused(capsys):
    """--gamma is γ where no --gamma-by-batch range applies: ranges that cover every decode batch (up to
    --max-num-seqs, or to --sd-off-from-batch) leave it to no step, so a --gamma given there is refused; it
    stays read where a batch falls outside the ranges, and with --tau (the γ that τ was measured at)."""
    base = [*SERVE, "--rate", "4", "--max-num-seqs", "16", "--gamma", "5"]
    assert main([*base, "--gamma-by-batch", "1-16:1"]) == 2
    assert "--gamma: 5 sets no step: --gamma-by-batch" in _one_line(capsys)
    given_default = [a if a != "5" else "3" for a in base]  # a 3 given was taken for the default, and ran
    assert main([*given_default, "--gamma-by-batch", "1-16:1"]) == 2
    assert "--gamma: 3 sets no step: --gamma-by-batch" in _one_line(capsys)
    assert main([*base, "--gamma-by-batch", "1-8:1", "--sd-off-from-batch", "9"]) == 2
    assert "decode batch 1..16 (--max-num-seqs)" in _one_line(capsys)
    assert main([*base, "--gamma-by-batch", "1-8:1"]) == 0
    capsys.readouterr()
    assert main([*base, "--gamma-by-batch", "1-16:2,17-32:5"]) == 2  # no step decodes more than 16
    assert "--gamma-by-batch: range 17-32:5 starts above --max-num-seqs 16" in _one_line(capsys)
    tau = ["serve", "--requests", "30", "--output-tokens", "32", "--tau", "3.2", "--rate", "4"]
    assert main([*tau, "--max-num-seqs", "16", "--gamma", "5", "--gamma-by-batch", "1-16:2"]) == 0
    policy = GammaPolicy(3, ((1, 8, 1),), off_from_batch=12)
    assert policy.falls_back(11) and not policy.falls_back(8)
    assert not GammaPolicy(3, ((1, 4, 2),)).falls_back(4)


def test_cli_needs_alpha(capsys):
    assert main(["serve", "--rate", "2"]) == 2
    assert "--alpha: needed" in _one_line(capsys)


@pytest.mark.parametrize(
    "line, expected",
    [
        ('{"arrival_s": 0.1, "prompt_tokens": 5}', "line 1.output_tokens: missing"),
        ('{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 3}', "line 1.arrival_s: expected >= 0.0"),
        ('{"arrival_s": 0.1, "prompt_tokens": 5, "output_tokens": 3, "speed": 1}', "line 1"),
        ("[1, 2]", "line 1: expected an object"),
        ("{not json", "line 1"),
    ],
)
def test_cli_bad_trace_is_one_line_and_writes_nothing(tmp_path, capsys, line, expected):
    path = tmp_path / "trace.jsonl"
    path.write_text(line + "\n")
    assert main(["serve", "--trace", str(path), "--alpha", "0.7"]) == 2
    assert expected in _one_line(capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.jsonl"]


def test_cli_trace_runs(tmp_path, capsys):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(
            json.dumps({"arrival_s": 0.1 * i, "prompt_tokens": 50, "images": i % 2, "output_tokens": 16})
            + "\n"
            for i in range(10)
        )
    )
    assert main(["serve", "--trace", str(path), "--alpha", "0.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparison"]["rate_per_s"] is None and data["comparison"]["sd"]["requests"] == 10
    for flag, value in (
        ("--prompt-tokens", "64"),
        ("--output-tokens", "8"),
        ("--images", "2"),
        ("--requests", "1000"),
    ):
        # the trace gives each request's lengths and images: a load option beside it would be ignored
        assert main(["serve", "--trace", str(path), "--alpha", "0.5", flag, value]) == 2
        assert f"{flag}: does not apply with --trace" in capsys.readouterr().err


def test_roofline_mixed_passes_equal_their_merged_pass_tables():
    """A step's target pass (decode rows + prefill chunks) and a draft block carrying the draft's prefill,
    priced from cached lines in Σ KV, equal the PassTable of their summed terms (the weights streamed once)
    built here from pass_terms, at sequences of different lengths, for runtimes with and without extra draft
    forwards, and one whose host time overlaps its device time (hf-eager)."""
    from specsim.hardware.device import load_device
    from specsim.hardware.passes import pass_table, pass_terms
    from specsim.hardware.plan_inputs import resolve_models
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost

    def merged_ms(m, dev, rt, decode, chunks):
        """decode: (batch, mean KV, rows) or None; chunks: (tokens, cached)."""
        parts = [pass_terms(m, dev, *decode)] if decode else []
        parts += [pass_terms(m, dev, 1, cached, tokens, logits=1) for tokens, cached in chunks]
        out = dict(parts[0])
        for p in parts[1:]:
            additive = ("flops", "base_bytes", "attention_flops", "kv_bytes")
            for k in additive + ("score_elems", "rows", "link_bytes", "kv_elems"):
                out[k] += p[k]
            out["masked"] = max(out["masked"], p["masked"])
        weights = pass_terms(m, dev, 1, 0, 1)["base_bytes"] - (
            pass_terms(m, dev, 2, 0, 1)["base_bytes"] - pass_terms(m, dev, 1, 0, 1)["base_bytes"]
        )
        out["base_bytes"] -= (len(parts) - 1) * weights
        return float(pass_table([out]).ms(rt)[0])

    _, t, d = resolve_models(pair="llava-1.5-7b-68m", target=None, draft=None)
    dev = load_device("a100-80gb-sxm")
    ctx = np.array([900.0, 1300.0, 2051.0])
    for runtime in ("vllm", "llama.cpp", "hf-eager"):
        rt = load_runtime(runtime)
        cost = RooflineStepCost(t, d, dev, rt)
        for batch, rows, chunks in [(3, 4, [(300, 0), (64, 512)]), (0, 1, [(1088, 0)]), (3, 1, [(128, 0)])]:
            decode = (batch, ctx[:batch].mean(), rows) if batch else None
            assert cost.target_step_ms(batch, rows, ctx, chunks) == pytest.approx(
                merged_ms(t, dev, rt, decode, chunks), rel=1e-9
            ), (runtime, batch, chunks)
        mean = ctx.mean()
        draft = merged_ms(d, dev, rt, (3, mean, 1), [(300, 0)])
        draft += sum(merged_ms(d, dev, rt, (3, mean + j, 1), []) for j in (1, 2))
        draft += rt.extra_draft_forwards_per_block * merged_ms(d, dev, rt, (3, mean, 1), [])
        # each draft forward pays the runtime's per-forward floor (a draft model's; 0 where not fitted)
        draft += (3 + rt.extra_draft_forwards_per_block) * rt.draft_floor_ms_per_forward
        assert cost.draft_ms(3, 3, ctx, [(300, 0)]) == pytest.approx(draft, rel=1e-9), runtime


@pytest.mark.parametrize("kv_cache_tokens", [None, 200])
@pytest.mark.parametrize("source", ["replay", "never", "always"])
def test_fast_forwarded_decode_steps_equal_the_step_by_step_schedule(kv_cache_tokens, source):
    """Fast-forwarded runs (record=False) equal step-by-step ones (record=True) exactly: trace replay one step
    per draw, and i.i.d. acceptance drawn in blocks (``accepted_steps``) at α = 0 and α → 1, where every
    draw is certain, so the blocks' caps at each request's last tokens are checked too."""
    rng = np.random.default_rng(11)
    traces = [rng.random(40) < 0.7 for _ in range(5)]
    acceptance = {
        "replay": ReplayAcceptance.from_matches(traces),
        "never": IidAcceptance(0.0),
        "always": IidAcceptance(1.0 - 1e-15),
    }[source]
    times = poisson_arrivals(60, 30.0, np.random.default_rng(12))
    req = Requests(times, rng.integers(5, 60, 60), np.zeros(60, dtype=np.int64), rng.integers(1, 30, 60))
    cost = ConstantStepCost(
        target_ms=5.0,
        target_ms_per_row=0.2,
        target_ms_per_context_token=0.001,
        prefill_ms_per_token=0.02,
        draft_ms_per_pass=0.7,
        overhead_ms_per_step=0.1,
    )
    sched = SchedulerConfig(max_num_seqs=6, max_num_batched_tokens=64, kv_cache_tokens=kv_cache_tokens)
    runs = [
        simulate(
            req,
            cost=cost,
            policy=GammaPolicy(3, parse_batch_ranges("5-6:1")),
            acceptance=acceptance,
            rng=np.random.default_rng(0),
            scheduler=sched,
            record=record,
        )
        for record in (True, False)
    ]
    step, fast = runs
    assert np.array_equal(step.first_token_s, fast.first_token_s)
    assert np.array_equal(step.finish_s, fast.finish_s)
    assert np.array_equal(np.sort(step.itl_gaps_ms), np.sort(fast.itl_gaps_ms))
    for key in ("steps", "itl_zero_tokens", "draft_tokens", "accepted_tokens", "sd_blocks"):
        assert getattr(step, key) == getattr(fast, key), key


def test_a_measured_profile_prices_steps_from_its_batched_grids(capsys):
    """--cost-profile: decode passes read the batched grids at the widest cache and B (a block's first draft
    step from its own grid); B beyond them fails."""
    from specsim.profile_format.cost_grid import grid_ms
    from specsim.profiles import load_profile
    from specsim.serve.profile_cost import ProfileStepCost

    cost = ProfileStepCost.from_profile(load_profile("zoo-cpu-batch"))
    loop = cost.batched.server_loop  # the server loop's own overhead where the profile measured it
    assert loop is not None and cost.overhead_ms(4, 3) == pytest.approx(loop.step_overhead_ms(4, 3))
    ctx = np.array([100.0, 120.0, 90.0, 80.0])
    verify, _ = grid_ms(cost.batched.target_verify, 4, 120.0, 4)
    steady = float(loop.pass_scale(None))  # the loop's passes long after an admission, over the grid's
    assert cost.target_step_ms(4, 4, ctx) == pytest.approx(verify * steady)
    steps, _ = grid_ms(cost.batched.draft_step, 1, 120.0 + np.arange(1, 3), 4)
    first, _ = grid_ms(cost.batched.draft_first_step, 1, 120.0, 4)  # a block's first step, measured apart
    draft = first + float(np.sum(steps))
    assert cost.draft_ms(4, 3, ctx) == pytest.approx(draft * float(loop.pass_scale(None, draft=True)))
    # one prompt's images go through the encoder in one call: the one-image call plus the slope after it
    lat = cost.passes.latency
    two = cost.target_step_ms(0, 1, ctx, [(50, 0, 2)]) - cost.target_step_ms(0, 1, ctx, [(50, 0, 0)])
    cold = loop.cold_pass_ms_scale  # a step with prefills runs them (the encoder too) cold
    assert two == pytest.approx(lat.vision_ms(2) * cold)
    with pytest.raises(SpecsimError, match="batch"):
        cost.target_step_ms(64, 4, np.full(64, 100.0))
    measured = [*SERVE, "--images", "0", "--prompt-tokens", "32", "--cost-profile", "zoo-cpu-batch"]
    assert main([*measured, "--max-num-seqs", "64"]) == 2
    assert "--max-num-seqs: 64 is beyond the profile's batched grid" in _one_line(capsys)
    assert main([*measured, "--rate", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scheduler"]["max_num_seqs"] == 8 and data["device"] == "measured profile zoo-cpu-batch"


def test_acceptance_profile_replays_its_traces(capsys):
    """--acceptance-profile: each simulated request follows a traced prompt, so the served mean acceptance
    length is the traces' replayed τ at γ (the requests here stop at the traces' length, one token earlier
    and from position 1: within a few %); bad combinations are one line, exit 2."""
    from specsim.acceptance.replay import replay_traces_tau
    from specsim.profiles import load_profile

    base = ["serve", "--requests", "24", "--output-tokens", "32", "--cost-profile", "zoo-cpu-batch"]
    base += ["--images", "0", "--prompt-tokens", "30", "--gamma", "3"]
    replay = ["--acceptance-profile", "zoo-cpu-batch", "--method", "M", "--scenario", "zoo-1img"]
    assert main([*base, *replay, "--rate", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["acceptance"] == "greedy traces of M/zoo-1img replayed"
    entry = load_profile("zoo-cpu-batch").one_entry("M", "zoo-1img")
    sd = data["comparison"]["sd"]
    tau = float(replay_traces_tau([t.match for t in entry.traces], 3))
    assert abs(sd["mean_acceptance_length"] / tau - 1) < 0.05, (sd["mean_acceptance_length"], tau)
    assert main([*base, *replay, "--alpha", "0.5"]) == 2
    assert "--alpha/--acceptance-profile: give one acceptance source, not 2" in _one_line(capsys)
    assert main([*base, "--method", "M", "--alpha", "0.5"]) == 2
    assert "--method: applies with --acceptance-profile only" in _one_line(capsys)
    assert main([*base, "--acceptance-profile", "zoo-cpu-batch"]) == 2
    assert "expected one acceptance entry" in _one_line(capsys)


def test_max_rate_search_brackets_the_slo_edge(capsys):
    """The search returns a rate that meets the SLO attainment while 3% more does not (the bisection's
    bracket), for SD and target-only; the CLI prints both; bad combinations are one line, exit 2."""
    from specsim.serve.compare import TARGET_ONLY, ServeSetup, Workload, max_rate_meeting_slo, meets_slo

    cost = ConstantStepCost(
        target_ms=20.0, target_ms_per_row=0.5, prefill_ms_per_token=0.02, draft_ms_per_pass=3.0
    )
    setup = ServeSetup(
        cost,
        Workload(300, 64, 0, 48),
        GammaPolicy(3),
        IidAcceptance(0.7),
        SchedulerConfig(max_num_seqs=16),
        Slo(ttft_ms=400.0, tpot_ms=25.0),
    )
    for policy in (setup.policy, TARGET_ONLY):
        rate = max_rate_meeting_slo(setup, policy, 0.9)
        assert rate is not None and meets_slo(setup, policy, rate, 0.9)
        assert not meets_slo(setup, policy, rate * 1.03, 0.9)
    argv = [*_with_requests(200), "--slo", "ttft=2000,tpot=40", "--max-rate"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "highest rate at which 90% of requests meet ttft=2000,tpot=40" in out and "target-only:" in out
    assert main([*SERVE, "--max-rate"]) == 2
    assert "--max-rate: needs --slo" in _one_line(capsys)
    for given in (["--rate", "8"], ["--rates", "8,16"]):  # they were ignored without a word
        assert main([*argv, *given]) == 2
        assert f"--max-rate: searches the rate itself, so {given[0]} does not apply" in _one_line(capsys)


def test_a_printed_max_rate_is_never_above_the_one_found(capsys):
    """3 significant digits, rounded down: 15.657 req/s (90.3 % meet the SLO) printed as 15.7, where 89.1 %
    meet it, read as a rate that holds."""
    from specsim.serve.serve_text import _at_most

    rng = np.random.default_rng(3)
    for rate in np.concatenate([[15.657, 10.152, 99.96, 1e-4, 2.0], 10 ** rng.uniform(-4, 5, 500)]):
        shown = float(_at_most(float(rate)))
        assert shown <= rate * (1 + 1e-12) and shown > rate * (1 - 0.01), (rate, shown)
    argv = [*_with_requests(200), "--slo", "ttft=2000,tpot=40", "--max-rate"]
    assert main([*argv, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["max_rate_per_s"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    for side, label in (("sd", "SD ("), ("target_only", "target-only:")):
        line = next(x for x in lines if x.strip().startswith(label))
        printed = float(line.split(": ", 1)[1].split(" req/s")[0])
        assert printed <= found[side] and printed == float(_at_most(found[side]))


def _vllm_result(tmp_path, **over):
    body = {
        "date": "20261125-120000",
        "backend": "vllm",
        "model_id": "llava-hf/llava-1.5-7b-hf",
        "num_prompts": 4,
        "request_rate": 4.0,
        "burstiness": 1.0,
        "median_ttft_ms": 52.5,
        "median_tpot_ms": 9.5,
        "output_throughput": 400.0,
        "input_lens": [120, 300, 80, 64],
        "output_lens": [32, 64, 16, 0],
        "errors": ["", "", "", "timeout"],
    } | over
    path = tmp_path / "result.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_a_vllm_bench_result_is_a_workload(tmp_path, capsys):
    """--trace result.json (vllm bench serve --save-result --save-detailed): its successful requests at its
    rate, its medians printed beside the simulation; a bad file is one line, exit 2."""
    from specsim.serve.vllm_bench import read_vllm_bench_result

    res = read_vllm_bench_result(_vllm_result(tmp_path))
    assert res.input_lens.tolist() == [120, 300, 80] and res.output_lens.tolist() == [32, 64, 16]
    assert res.request_rate == 4.0 and res.measured["median_tpot_ms"] == 9.5
    reqs = res.requests(np.random.default_rng(0))
    assert len(reqs) == 3 and np.all(np.diff(reqs.arrival_s) >= 0) and reqs.arrival_s[0] > 0
    inf = read_vllm_bench_result(_vllm_result(tmp_path, request_rate="inf"))
    assert inf.request_rate is None and np.all(inf.requests(np.random.default_rng(0)).arrival_s == 0)
    argv = ["serve", "--alpha", "0.7", "--trace", _vllm_result(tmp_path)]
    assert main(argv) == 0
    assert "vllm bench serve measured: median_ttft_ms 52.5, median_tpot_ms 9.5" in capsys.readouterr().out
    for over, expected in (
        ({"input_lens": None}, "input_lens: expected a non-empty list"),
        ({"request_rate": "fast"}, "request_rate: expected a finite number, got 'fast'"),
        ({"output_lens": [1, 2]}, "expected input_lens and output_lens of the same length"),
    ):
        assert main(["serve", "--alpha", "0.7", "--trace", _vllm_result(tmp_path, **over)]) == 2
        assert expected in _one_line(capsys)


@pytest.mark.parametrize(
    "model_id, note",
    [
        ("llava-hf/llava-1.5-7b-hf", None),  # the target simulated: no note
        ("", None),  # the file names none
        ("Qwen/Qwen3-8B", "measured Qwen/Qwen3-8B, not llava-1.5-7b: its figures are not this run's"),
        ("my-org/my-model", "measured my-org/my-model, which specsim cannot size to tell whether it is"),
    ],
)
def test_a_vllm_bench_result_of_another_model_is_noted(tmp_path, capsys, model_id, note):
    """The measured figures printed beside the simulation are its model's: another model's were shown
    without a word."""
    argv = ["serve", "--alpha", "0.7", "--json", "--trace", _vllm_result(tmp_path, model_id=model_id)]
    assert main(argv) == 0
    notes = [n for n in json.loads(capsys.readouterr().out).get("notes", []) if "vllm bench serve" in n]
    assert notes == [] if note is None else len(notes) == 1 and note in notes[0]


def test_a_sweep_on_two_processes_equals_one():
    """--jobs: the rates of a sweep are pure functions of (setup, rate), so processes change nothing."""
    from specsim.serve.compare import ServeSetup, Workload, sweep_rates

    setup = ServeSetup(HAND_COST, Workload(200, 64, 0, 32), GammaPolicy(3), IidAcceptance(0.6), seed=3)
    one = sweep_rates(setup, [8, 2, 4], jobs=1).to_json()
    assert sweep_rates(setup, [2, 4, 8], jobs=2).to_json() == one


def test_plot_of_a_rate_sweep(tmp_path, capsys):
    """--plot writes a PNG of the sweep; without --rates it is refused before anything runs."""
    out = tmp_path / "rates.png"
    assert main([*_with_requests(60), "--rates", "1,4,16", "--plot", str(out), "--no-progress"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main([*SERVE, "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot: draws a rate sweep; give --rates" in _one_line(capsys)
    assert not (tmp_path / "x.png").exists()


def test_roofline_decode_steps_equal_step_by_step_pricing():
    """The cached lines of decode_steps_ms price every step as step_ms does (each roofline part is
    affine in the summed context), for runtimes with and without extra draft forwards."""
    from specsim.hardware.device import load_device
    from specsim.hardware.plan_inputs import resolve_models
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost
    from specsim.serve.step_cost import step_ms

    _, t, d = resolve_models(pair="llava-1.5-7b-68m", target=None, draft=None)
    ctx = np.random.default_rng(5).integers(100, 4000, size=(6, 5)).astype(float)
    for runtime in ("vllm", "llama.cpp", "hf-eager"):
        cost = RooflineStepCost(t, d, load_device("a100-80gb-sxm"), load_runtime(runtime))
        for gamma in (0, 3):
            fast = cost.decode_steps_ms(batch=5, gamma=gamma, context_tokens=ctx)
            slow = [
                step_ms(
                    cost,
                    batch=5,
                    gamma=gamma,
                    context_tokens=row,
                    prefill_chunks=(),
                    images=0,
                    draft_prefill=False,
                )
                for row in ctx
            ]
            assert fast == pytest.approx(slow, rel=1e-9), (runtime, gamma)


def test_text_only_drafting_skips_the_image_positions_in_the_draft_prefill(capsys):
    """--draft-image-tokens 0 (text-only drafting): the draft's prefill of an image prompt drops the image's
    positions, so it costs what a text prompt of the remaining tokens costs; decode passes are unchanged and
    the whole-step price still equals its parts. Out-of-range values are refused."""
    from specsim.hardware.device import load_device
    from specsim.hardware.plan_inputs import resolve_models
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost

    _, t, d = resolve_models(pair="llava-1.5-7b-68m", target=None, draft=None)
    dev, rt = load_device("h100-sxm"), load_runtime("vllm")
    multi = RooflineStepCost(t, d, dev, rt)
    text = RooflineStepCost(t, d, dev, rt, draft_image_tokens_per_image=0)
    ctx = np.array([900.0, 1200.0])
    image_chunk = [(512 + 576, 0, 1)]
    assert text.draft_ms(0, 3, ctx[:0], image_chunk) == pytest.approx(
        multi.draft_ms(0, 3, ctx[:0], [(512, 0)])
    )
    assert text.draft_ms(0, 3, ctx[:0], image_chunk) < multi.draft_ms(0, 3, ctx[:0], image_chunk)
    assert text.draft_ms(2, 3, ctx) == pytest.approx(multi.draft_ms(2, 3, ctx))
    with pytest.raises(SpecsimError, match="--draft-image-tokens: expected 0..576"):
        RooflineStepCost(t, d, dev, rt, draft_image_tokens_per_image=600)
    assert main([*SERVE, "--draft-image-tokens", "0", "--rate", "4"]) == 0
    capsys.readouterr()
    assert (
        main([*SERVE, "--draft-image-tokens", "0", "--cost-profile", "zoo-cpu-batch", "--images", "0"]) == 2
    )
    assert "--draft-image-tokens: applies to roofline pricing" in _one_line(capsys)


def test_kv_cache_past_the_kv_heads_is_counted_as_the_planner_counts_it():
    """Llama-3.1-8B has 8 KV heads: past tp 8 each GPU holds every position of its replicated heads, so the
    cache grows only by the weights' share it frees (tp 16 doubled it to 6.9M tokens against hardware's
    3.46M); the positions are those the planner's per-GPU bytes fit, exactly."""
    from specsim.hardware.device import load_device
    from specsim.hardware.model_resolution import load_model_spec
    from specsim.hardware.parallel import per_gpu_resident_bytes
    from specsim.hardware.roofline import USABLE_MEMORY_FRACTION
    from specsim.hardware.runtime import load_runtime
    from specsim.serve.roofline_cost import RooflineStepCost

    target, draft = load_model_spec("llama-3.1-8b"), load_model_spec("llama-3.2-1b")
    dev, rt = load_device("h100-sxm"), load_runtime("vllm")
    k8, k16 = (RooflineStepCost(target, draft, dev, rt, tp=tp).kv_cache_tokens() for tp in (8, 16))
    assert k8 < k16 < 1.05 * k8
    usable = USABLE_MEMORY_FRACTION * dev.memory_bytes
    fits = lambda n: per_gpu_resident_bytes(target, draft, 1, n, 16, 16) <= usable  # noqa: E731
    assert fits(k16) and not fits(k16 + 1)


def test_what_a_cost_profile_or_the_default_pair_cannot_price_is_refused(capsys):
    """--cost-profile priced its own measured draft whatever --draft-kind said, and ignored --device and
    --image-size; a drafting kind without --target ran the default pair's 68M draft model under its label."""
    base = ["serve", "--cost-profile", "zoo-cpu-batch", "--alpha", "0.7", "--images", "0", "--requests", "20"]
    for extra, flag in (
        (["--draft-kind", "ngram"], "--draft-kind"),
        (["--device", "l4"], "--device"),
        (["--device", "h100-sxm"], "--device"),  # the default, given: it was taken without a word
        (["--image-size", "640x480"], "--image-size"),
    ):
        assert main([*base, *extra]) == 2
        assert f"{flag}: applies to roofline pricing, not with --cost-profile" in _one_line(capsys)
    assert main(["serve", "--alpha", "0.7", "--draft-kind", "ngram", "--requests", "20"]) == 2
    assert "--draft-kind ngram: needs --target" in _one_line(capsys)


def test_a_tau_of_gamma_plus_one_serves_every_draft_accepted(capsys):
    """--tau 4 at --gamma 3 (every draft accepted, alpha 1) failed on an option not given: 'alpha: expected
    0 <= alpha < 1, got 1.0'."""
    assert main(["serve", "--tau", "4", "--gamma", "3", "--requests", "20", "--json"]) == 0
    sd = json.loads(capsys.readouterr().out)["comparison"]["sd"]
    assert sd["mean_acceptance_length"] == pytest.approx(4.0) and sd["acceptance_rate"] == pytest.approx(1.0)


def test_a_price_of_zero_is_printed_as_the_json_has_it(capsys):
    """--price h100-sxm=0 gives $0 per Mtok in --json; the text table prints that row too (it took 0.0 for
    no price and left the row out)."""
    argv = [*SERVE, "--rate", "4", "--price", "h100-sxm=0"]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usd_per_million_output_tokens"]["sd"] == 0.0
    assert main(argv) == 0
    assert "$/Mtok (output)" in capsys.readouterr().out


def test_an_encoder_budget_with_no_image_to_encode_is_refused(capsys):
    """--encoder-budget caps the image tokens encoded per step; with --images 0 it changes nothing (as
    --draft-image-tokens there, it is refused)."""
    assert main([*SERVE, "--rate", "4", "--images", "0", "--encoder-budget", "1000"]) == 2
    assert "--encoder-budget: caps the image tokens encoded per step, and no request" in _one_line(capsys)
    assert main([*SERVE, "--rate", "4", "--encoder-budget", "1000"]) == 0
    capsys.readouterr()
    qwen = ["--target", "qwen2.5-vl-7b", "--draft", "qwen2.5-vl-3b", "--image-size", "448x448"]
    assert main([*SERVE, "--rate", "4", *qwen, "--images", "0"]) == 2
    assert "--image-size: sizes the requests' images, and no request has one" in _one_line(capsys)
    assert main([*SERVE, "--rate", "4", *qwen]) == 0


def test_acceptance_carried_past_its_gamma_is_marked(capsys):
    """--tau at gamma 3 served at gamma 5 (or an imported histogram past its K) printed no word that tau there
    is an i.i.d. extrapolation, as hardware and predict mark it."""
    base = ["serve", "--tau", "2.5", "--gamma", "3", "--requests", "30", "--output-tokens", "16"]
    assert main([*base, "--gamma-by-batch", "1-8:5"]) == 0
    assert "note: acceptance at gamma 5 is an extrapolation (iid from gamma=3: tau 2.89 there)" in (
        capsys.readouterr().out
    )
    assert main(base) == 0
    assert "extrapolation" not in capsys.readouterr().out


def test_sd_off_from_batch_1_is_refused(capsys):
    """--gamma-by-batch 1-8:3 --sd-off-from-batch 1 served target-only under an 'SD' label, without a word."""
    argv = ["serve", "--alpha", "0.7", "--gamma-by-batch", "1-8:3", "--sd-off-from-batch", "1"]
    assert main([*argv, "--requests", "20"]) == 2
    assert "--sd-off-from-batch: 1 turns SD off at every batch" in capsys.readouterr().err


def test_a_measured_profiles_kv_cache_is_unbounded_not_a_number(capsys):
    """serve --cost-profile printed 'KV cache 1073741824 tokens' (and the JSON that number): a sentinel for
    no cap, shown as a size."""
    argv = [
        "serve",
        "--cost-profile",
        "zoo-cpu-batch",
        "--acceptance-profile",
        "zoo-cpu-batch",
        "--method",
        "M",
    ]
    argv += ["--scenario", "zoo-1img", "--rate", "20", "--requests", "30", "--no-progress"]
    assert main(argv) == 0
    assert "KV cache unbounded (--kv-cache-tokens caps it)" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scheduler"]["kv_cache_tokens"] is None
    assert main([*argv, "--kv-cache-tokens", "5000"]) == 0
    assert "KV cache 5000 tokens" in capsys.readouterr().out


def test_a_schedule_over_every_batch_shows_no_fixed_gamma(capsys):
    """The header printed 'SD: gamma=3, by batch 1-24:5,25-4096:3' where no step takes gamma 3."""
    argv = ["serve", "--alpha", "0.7", "--max-num-seqs", "64", "--requests", "50", "--rate", "4"]
    assert main([*argv, "--gamma-by-batch", "1-24:5,25-4096:3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sd_policy"] == "by batch 1-24:5,25-4096:3"
    assert main([*argv, "--gamma-by-batch", "1-24:5", "--json"]) == 0  # batches 25..64 take gamma 3
    assert json.loads(capsys.readouterr().out)["sd_policy"] == "gamma=3, by batch 1-24:5"


def test_the_rate_plot_labels_the_swept_rates(tmp_path, monkeypatch):
    """Log-axis minor labels collided on every panel ('2x10^0 3x10^0 4x10^0 6x10^0')."""
    from specsim.serve import serve_plots

    drawn = {}
    monkeypatch.setattr(serve_plots, "save_png", lambda fig, path: drawn.setdefault("fig", fig))
    assert (
        main([*_with_requests(60), "--rates", "1,2,4,8", "--plot", str(tmp_path / "r.png"), "--no-progress"])
        == 0
    )
    for ax in drawn["fig"].axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
        assert not [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
