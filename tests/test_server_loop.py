"""The real server loop (continuous batching with SD) and the serving check built on it.

- lossless: requests joining and leaving at arrival times, each request's greedy tokens equal target-only
  decoding of it alone (text pair, tiny LLaVA with 1/2/5 images, multimodal and text-only drafting);
- the schedule on a fake clock: admissions, batch sizes, stamps and first tokens follow the module's rules;
- the cache operations (join, keep, compact) keep every row's attention the same;
- the measured summary of hand-made stamps equals hand-computed TTFT, TPOT, ITL and throughput;
- bad inputs give one-line errors.
"""

import numpy as np
import pytest
import torch

from calibrate.drafting.contexts import MultimodalContext, TextOnlyContext
from calibrate.run.batch_engine import PaddedCache
from calibrate.run.engine import target_decode
from calibrate.run.proposal import Request
from calibrate.run.server_loop import compact, join_rows, keep_rows, serve_loop
from specsim.check.serve_comparison import ServedTimes, measured_run, rel_halfwidth
from specsim.errors import SpecsimError
from specsim.serve.metrics import summarize
from tests.tiny_pair import tiny_pair, tiny_prompts, tiny_zoo

NEW = 20
ARRIVALS = [0.0, 0.0, 0.05, 0.1, 0.11, 0.3, 0.31, 0.9]


class FakeClock:
    """Advances ``tick`` s per reading; ``sleep`` jumps ahead."""

    def __init__(self, tick: float = 0.01):
        self.t, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture(scope="module")
def text_world():
    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(8))]
    alone = [target_decode(target, r, max_new_tokens=NEW).tokens for r in requests]
    return target, draft, requests, alone


@pytest.mark.parametrize("gamma", [0, 1, 3, 5])
@pytest.mark.parametrize("max_num_seqs", [1, 3, 8])
def test_requests_joining_and_leaving_are_lossless(text_world, gamma, max_num_seqs):
    target, draft, requests, alone = text_world
    clock = FakeClock()
    run = serve_loop(
        target,
        draft,
        requests,
        ARRIVALS,
        gamma=gamma,
        max_new_tokens=NEW,
        max_num_seqs=max_num_seqs,
        compact_columns=2,
        clock=clock,
        sleep=clock.sleep,
    )
    assert [r.tokens for r in run.requests] == [tuple(a) for a in alone]
    assert all(len(r.token_times_s) == NEW for r in run.requests)
    assert max(s.decoding for s in run.steps) <= max_num_seqs
    if max_num_seqs > 1:
        assert len({s.decoding for s in run.steps}) > 2  # the batch grew and shrank


def test_tiny_llava_served_with_images_is_lossless():
    z = tiny_zoo()
    requests = [z["requests"][k] for k in (1, 2, 5)] * 3
    eos, pad = z["tok"].eos_token_id, z["tok"].pad_token_id or 0
    alone = [target_decode(z["target"], r, max_new_tokens=16, eos_token_id=eos).tokens for r in requests]
    arrivals = [0, 0.02, 0.04, 0.1, 0.12, 0.3, 0.31, 0.5, 0.6]
    for members, gamma in (([MultimodalContext()], 3), ([TextOnlyContext(tokenizer=z["tok"])], 2), (None, 0)):
        clock = FakeClock()
        run = serve_loop(
            z["target"],
            z["draft"],
            requests,
            arrivals,
            gamma=gamma,
            max_new_tokens=16,
            members=members,
            pad_id=pad,
            eos_token_id=eos,
            max_num_seqs=4,
            compact_columns=1,
            clock=clock,
            sleep=clock.sleep,
        )
        assert [r.tokens for r in run.requests] == [tuple(a) for a in alone], gamma


def test_the_schedule_on_a_fake_clock(text_world):
    """Requests 0 and 1 arrive at 0 and are admitted in the first step (prefill, first token at its end);
    request 2 arrives at 0.05 and waits for the step running then; every token is stamped with its step's
    end; the first step decodes nobody; a request's last stamp is its finish."""
    target, draft, requests, _ = text_world
    clock = FakeClock(0.01)
    run = serve_loop(
        target,
        draft,
        requests[:3],
        [0.0, 0.0, 0.05],
        gamma=2,
        max_new_tokens=6,
        max_num_seqs=2,
        clock=clock,
        sleep=clock.sleep,
    )
    first = run.steps[0]
    assert first.admitted == 2 and first.decoding == 0
    assert run.requests[0].first_token_s == run.requests[1].first_token_s == first.end_s
    admitted_at = next(s for s in run.steps if s.admitted and s is not first)
    assert admitted_at.start_s >= 0.05 and admitted_at.end_s == run.requests[2].first_token_s
    assert max(s.decoding for s in run.steps if s.start_s < run.requests[0].finish_s) <= 2
    ends = {s.end_s for s in run.steps}
    for r in run.requests:
        assert set(r.token_times_s) <= ends and r.token_times_s[-1] == r.finish_s
        assert list(r.token_times_s) == sorted(r.token_times_s)
    # each SD step's emissions are its accepted drafts + 1 (tokens left permitting)
    for s in run.steps:
        if s.decoding:
            assert all(e <= a + 1 for a, e in zip(s.accepted, s.emitted))


def test_cache_join_keep_and_compact_keep_each_row_the_same():
    """A row's next-token logits are the same alone and inside a joined, filtered, compacted batch."""
    target, _ = tiny_pair()
    prompts = tiny_prompts(3)

    def alone(ids):
        c = PaddedCache(target, 1, target.device)
        c.forward(torch.ones_like(ids), keep=1, input_ids=ids)
        return c

    with torch.inference_mode():
        batch = None
        for p in prompts:
            batch = join_rows(batch, alone(p))
        assert batch.mask.shape == (3, max(p.shape[1] for p in prompts))
        batch.reject(torch.tensor([batch.columns - 1, batch.columns, batch.columns]))  # row 0's last column
        batch = keep_rows(batch, [2, 0])
        compact(batch, 1)
        assert bool(batch.mask.any(0).all())  # no column is dead in every row
        nxt = torch.tensor([[5], [7]])
        got = batch.forward(torch.ones_like(nxt), keep=1, input_ids=nxt)[:, -1]
        for row, (p, tok, cut) in enumerate(((prompts[2], 5, 0), (prompts[0], 7, 1))):
            ref = alone(p[:, : p.shape[1] - cut])
            want = ref.forward(torch.ones(1, 1, dtype=torch.long), keep=1, input_ids=torch.tensor([[tok]]))
            assert torch.allclose(got[row], want[0, -1], atol=1e-4)
    assert keep_rows(batch, []) is None


def test_measured_metrics_from_hand_made_stamps():
    """Two requests: TTFT 0.1 and 0.2 s, TPOT (finish − first) / (tokens − 1), throughput tokens / span."""
    times = ServedTimes(
        arrival_s=(0.0, 0.5),
        first_token_s=(0.1, 0.7),
        finish_s=(0.4, 0.9),
        token_times_s=((0.1, 0.2, 0.2, 0.4), (0.7, 0.9)),
        prompt_tokens=(10, 12),
        images=(0, 0),
    )
    m = summarize(measured_run(times))
    assert m.ttft_ms.p50 == pytest.approx(150.0) and m.ttft_ms.p90 == pytest.approx(190.0)
    assert m.tpot_ms.p50 == pytest.approx(150.0)  # (0.4 - 0.1) / 3 and (0.9 - 0.7) / 1 s
    assert m.output_tokens_per_s == pytest.approx(6 / 0.9)
    assert m.itl_ms.p50 == pytest.approx(150.0)  # gaps 100, 0, 200 and 200 ms
    assert rel_halfwidth([1.0, 1.0, 1.0]) == 0.0 and rel_halfwidth([1.0]) == float("inf")


def test_bad_loop_inputs_are_refused(text_world):
    target, draft, requests, _ = text_world
    with pytest.raises(SpecsimError, match="arrival_s: expected 2 times"):
        serve_loop(target, draft, requests[:2], [0.0], gamma=1, max_new_tokens=4)
    with pytest.raises(SpecsimError, match="arrival order"):
        serve_loop(target, draft, requests[:2], [0.5, 0.1], gamma=1, max_new_tokens=4)
    with pytest.raises(SpecsimError, match="max_num_seqs: expected an integer >= 1"):
        serve_loop(target, draft, requests[:2], [0, 0], gamma=1, max_new_tokens=4, max_num_seqs=0)
    with pytest.raises(SpecsimError, match="at least one request"):
        serve_loop(target, draft, [], [], gamma=1, max_new_tokens=4)


def _copy_zoo_profile(tmp_path):
    from specsim.profiles import resolve_profile_path

    path = tmp_path / "zoo.json"
    path.write_bytes(resolve_profile_path("zoo-cpu-batch").read_bytes())
    return path


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--serve-rates", "0"], "--serve-rates: expected requests per second in [1e-06, 1e+06]"),
        (["--serve-rates", "2,2"], "--serve-rates: expected distinct rates"),
        (["--serve-rates", "2", "--max-num-seqs", "64"], "--max-num-seqs: batch 64 was not measured"),
        (["--serve-rates", "2", "--batch", "2"], "--serve-rates: runs fixed gamma, greedy"),
        (["--serve-rates", "2", "--serve-requests", "0"], "--serve-requests"),
    ],
)
def test_check_serve_bad_options_exit_2_and_write_nothing(tmp_path, capsys, extra, expected):
    from specsim.cli.main import main

    path = _copy_zoo_profile(tmp_path)
    before = path.read_bytes()
    argv = ["check", "--preset", "zoo", "--profile", str(path), "--method", "M", "--gamma", "2", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert path.read_bytes() == before


@pytest.mark.parametrize("remeasure", [False, True])
def test_check_serve_runs_the_zoo_and_writes_its_rows(tmp_path, capsys, monkeypatch, remeasure):
    """A small serving check end to end: target-only and M at γ 2, one rate, one round; the rows land in the
    profile with every metric predicted and measured. With --remeasure-batched a sweep round at every batch
    size and a round of the server loop's costs run before each serving round (both stubbed here: the fit is
    tested in test_batch_pricing.py, the loop rounds' mean in test_loop_prefill_setup.py)."""
    import json

    from calibrate.measure.interleaved_grid import InterleavedGrid

    log = []
    monkeypatch.setattr(InterleavedGrid, "measure_server_loop", lambda self: log.append("loop"))
    monkeypatch.setattr(InterleavedGrid, "round", lambda self, sizes=None: log.append(sizes))
    monkeypatch.setattr(
        InterleavedGrid, "measured_profile", lambda self: (log.append("fit"), self.profile)[1]
    )

    from specsim.cli.main import main
    from specsim.profiles import load_profile

    path = _copy_zoo_profile(tmp_path)
    argv = [
        "check",
        "--preset",
        "zoo",
        "--profile",
        str(path),
        "--threads",
        "1",
        "--method",
        "M",
        "--gamma",
        "2",
        "--serve-rates",
        "40",
        "--serve-requests",
        "6",
        "--max-new-tokens",
        "8",
        "--min-rounds",
        "1",
        "--max-rounds",
        "1",
        "--no-progress",
        "--json",
    ] + (["--remeasure-batched"] if remeasure else [])
    assert main(argv) == 0
    assert log == ([None, "loop", "fit"] if remeasure else [])
    out = json.loads(capsys.readouterr().out)
    assert [(r["method"], r["gamma"]) for r in out["rows"]] == [("target", 0), ("M", 2)]
    rows = [r for r in load_profile(str(path)).serve_checks if r.rate_per_s == 40 and r.requests == 6]
    assert len(rows) == 2 and all(r.scenario == "zoo-mixed" for r in rows)
    for r in rows:
        for m in r.metrics.values():
            assert m["predicted"] > 0 and m["measured"] > 0
            assert m["halfwidth"] is None  # one round bounds nothing (it was stored and printed as ±0.0%)
        # how close they are is a timing goal (bench/, the committed serving rows), not a unit test's: a busy
        # host slows the measured side alone
        assert np.isfinite(r.error("output_tokens_per_s"))
    from specsim.check.serve_comparison import serve_table

    assert "one round" in serve_table(rows) and "±" not in serve_table(rows)


def test_server_loop_costs_round_trip_and_price_steps():
    """A profile's measured server-loop costs load back equal, replace the static engine's overhead per step
    (a + b·B at γ, interpolated between γ) and charge each admission its join-and-leave ms."""
    from dataclasses import replace

    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.profile_format.batched_cost import BatchedCosts, ServerLoopCosts
    from specsim.profiles import load_profile
    from specsim.serve.profile_cost import ProfileStepCost

    loop = ServerLoopCosts((0, 1, 3), ((0.05, 0.01), (0.2, 0.03), (0.3, 0.05)), 0.5)
    base = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-batch").latency.forward_costs().batched
    with_loop = replace(base, server_loop=loop)
    assert BatchedCosts.from_json(with_loop.to_json()) == with_loop
    model = replace(
        load_profile("qwen2.5-coder-0.5b-1.5b-cpu-batch").latency.forward_costs(), batched=with_loop
    )
    cost = ProfileStepCost(GridPassCost(model, with_loop))
    assert cost.overhead_ms(4, 3) == pytest.approx(0.3 + 0.05 * 4)
    assert cost.overhead_ms(4, 2) == pytest.approx(0.25 + 0.04 * 4)  # between γ 1 and 3
    assert cost.overhead_ms(2, 0) == pytest.approx(0.07)
    plain = ProfileStepCost(GridPassCost(model, base))
    chunks = [(40, 0, 0), (30, 0, 0)]
    ctx = np.zeros(0)
    assert cost.target_step_ms(0, 1, ctx, chunks) - plain.target_step_ms(0, 1, ctx, chunks) == pytest.approx(
        1.0
    )
    with pytest.raises(SpecsimError, match="server_loop.step_ms: expected 3"):
        BatchedCosts.from_json(
            with_loop.to_json() | {"server_loop": loop.to_json() | {"step_ms": [[0.1, 0.0]]}}
        )


def test_a_step_with_prefills_prices_its_passes_cold():
    """The server loop runs prefills (and the vision encoder) between its passes: a step that carries
    prefills prices them, its target pass and its draft steps at the loop's measured cold-pass scale, a step
    without them as the grid measured them; older profiles (no scale) price every pass warm."""
    from dataclasses import replace

    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.profile_format.batched_cost import BatchedCosts, ServerLoopCosts
    from specsim.profiles import load_profile
    from specsim.serve.profile_cost import ProfileStepCost

    forward = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-batch").latency.forward_costs()
    warm_loop = ServerLoopCosts((0, 3), ((0.05, 0.01), (0.3, 0.05)), 0.5)
    cold_loop = replace(warm_loop, cold_pass_ms_scale=1.25)

    def cost(loop):
        batched = replace(forward.batched, server_loop=loop)
        return ProfileStepCost(GridPassCost(replace(forward, batched=batched), batched))

    cold, warm = cost(cold_loop), cost(warm_loop)
    ctx, chunks = np.full(4, 60.0), [(40, 0, 0)]
    assert cold.target_step_ms(4, 1, ctx) == warm.target_step_ms(4, 1, ctx)
    # everything but the admission's join-and-leave ms (0.5) runs cold: prefills, vision encoder and pass
    warm_step = warm.target_step_ms(4, 1, ctx, chunks)
    assert cold.target_step_ms(4, 1, ctx, chunks) - warm_step == pytest.approx(0.25 * (warm_step - 0.5))
    assert warm_step - 0.5 > warm.target_step_ms(4, 1, ctx)  # the prefill is in it
    warm_draft = warm.draft_ms(4, 3, ctx, chunks)
    assert cold.draft_ms(4, 3, ctx, chunks) - warm_draft == pytest.approx(0.25 * warm_draft)
    as_json = cold_loop.to_json()
    assert ServerLoopCosts.from_json(as_json, "x") == cold_loop
    old = {k: v for k, v in as_json.items() if k != "cold_pass_ms_scale"}
    assert ServerLoopCosts.from_json(old, "x").cold_pass_ms_scale == 1.0
    with pytest.raises(SpecsimError, match="server_loop.cold_pass_ms_scale"):
        BatchedCosts.from_json(
            forward.batched.to_json() | {"server_loop": as_json | {"cold_pass_ms_scale": 0}}
        )


def test_greedy_trace_lookup_names_what_is_missing():
    """The one trace lookup of `check --batch` and `check --serve-rates`: a prompt without a greedy trace is a
    one-line error naming the method, the scenario and the prompt."""
    from calibrate.measure.check_runs import greedy_trace
    from specsim.profiles import load_profile

    entry = load_profile("zoo-cpu-batch").one_entry("M", "zoo-1img")
    first = entry.traces[0]
    assert greedy_trace(entry, first.prompt_id) is first
    with pytest.raises(
        SpecsimError, match="method 'M' in scenario 'zoo-1img': no greedy trace for prompt 'nope'"
    ):
        greedy_trace(entry, "nope")


def test_check_batch_remeasures_the_grid_in_its_own_process(tmp_path, capsys, monkeypatch):
    """--remeasure-batched: a round of the batched sweep runs before each check round at its batch size, the
    grid's other batch sizes get theirs after the check, at the profile's gammas with prompts sized to the
    check's own; the rows are predicted from it, and it is written with them (the server loop's costs kept,
    --batch does not time them)."""
    from calibrate.measure.interleaved_grid import InterleavedGrid
    from specsim.cli.main import main
    from specsim.profiles import load_profile

    log = []
    real = InterleavedGrid.round
    monkeypatch.setattr(
        InterleavedGrid, "round", lambda self, sizes=None: (log.append(sizes), real(self, sizes))
    )
    path = _copy_zoo_profile(tmp_path)
    old = load_profile(str(path)).latency.forward_costs().batched
    argv = ["check", "--preset", "zoo", "--profile", str(path), "--threads", "1", "--method", "M"]
    argv += ["--gamma", "3", "--batch", "2", "--max-new-tokens", "64", "--min-rounds", "1"]
    argv += ["--max-rounds", "1"]
    assert main([*argv, "--no-progress", "--remeasure-batched"]) == 0
    assert "batched cost re-measured between the check's rounds" in capsys.readouterr().err
    assert log == [(2,), (1,), (4,), (8,)]
    new = load_profile(str(path))
    costs = new.latency.forward_costs().batched
    assert costs.batch_sizes == old.batch_sizes
    assert costs.overhead_ms_per_block.gamma == old.overhead_ms_per_block.gamma
    assert costs.target_verify != old.target_verify and costs.server_loop == old.server_loop
    assert any(r.batch == 2 and r.new_tokens == 64 for r in new.checks)
