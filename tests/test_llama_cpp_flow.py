"""The llama.cpp check's flow without llama.cpp: a stand-in server answers as llama-server does (its
``timings``), the runs resume from their partial file, and the rows carry both predictions."""

from dataclasses import replace

import numpy as np
import pytest

from calibrate.llama_cpp import check_runs
from calibrate.llama_cpp.traces import TracedPrompt
from specsim.check.check_tables import terms_table
from specsim.draft_shapes.ngram_lookup import NgramSimple
from tests.test_llama_cpp_pricing import llama_like_profile


class FakeServer:
    """Answers completions like llama-server: 100 ms per target step, 250 ms per SD block."""

    def __init__(self, llama, config, niceness=0):
        self.config, self.pid = config, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def tokenize_chat(self, text):
        return list(range(40 + len(text) % 7))

    def complete(self, tokens, n):
        if self.config.spec_type is None:
            return {
                "timings": {
                    "prompt_n": len(tokens),
                    "prompt_ms": 500.0,
                    "predicted_n": n,
                    "predicted_ms": 100.0 * (n - 1),
                }
            }
        accepted = (n - 1) // 2
        steps = n - 1 - accepted
        return {
            "timings": {
                "prompt_n": len(tokens),
                "prompt_ms": 600.0,
                "predicted_n": n,
                "predicted_ms": 250.0 * steps,
                "draft_n": 2 * steps,
                "draft_n_accepted": accepted,
            }
        }


def test_runs_resume_and_rows_carry_both_predictions(monkeypatch, tmp_path):
    monkeypatch.setattr(check_runs, "LlamaServer", FakeServer)
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    ids = [t.prompt_id for t in entry.traces[:3]]
    traces = tuple(
        replace(t, prompt_tokens=40 + len(f"p{i}") % 7, tokens=tuple(range(64)), prompt_ids=tuple(range(40)))
        for i, t in enumerate(entry.traces[:3])
    )
    profile = replace(profile, acceptance=(replace(entry, traces=traces),))
    prompts = [TracedPrompt(p, f"p{i}") for i, p in enumerate(ids)]
    settings = check_runs.check_settings("t.gguf", "d.gguf", 2, [1, 3], NgramSimple(3, 6))
    kw = dict(new_tokens=32, threads=2, partial=tmp_path / "p.json", halfwidth=0.5, min_rounds=2)
    first = check_runs.run_llama_check(None, settings, prompts, max_seconds=None, max_rounds=1, **kw)
    assert first.rounds == 1 and (tmp_path / "p.json").exists()  # a slice ends; the next goes on
    runs = check_runs.run_llama_check(None, settings, prompts, max_seconds=None, max_rounds=2, **kw)
    assert runs.finished and runs.rounds == 2
    rows = check_runs.llama_rows(profile, profile.acceptance[0], runs, settings, 1)
    assert [r.gamma for r in rows] == [1, 3, 6] and rows[-1].draft == "ngram-simple:3,6"
    for r in rows:
        assert r.runtime == "llama.cpp" and r.speedup_measured == pytest.approx(100.0 / (250.0 * 16 / 31))
        assert r.tau_measured == pytest.approx(32 / (1 + 31 - 15))
        assert np.isfinite(r.speedup_predicted) and np.isfinite(r.speedup_predicted_counts)
        assert r.terms_ms_per_block["block"]["measured"] == pytest.approx(250.0)
    # the printed terms: the whole block and the target-only step, no split the engine did not report
    lines = terms_table(rows).splitlines()
    heads = lines[1].split()
    assert heads[heads.index("block") + 1] == "pred" and "verify" not in heads and "target" in heads
    assert "250.000" in lines[3] and len(lines) == 3 + len(rows)


def test_requests_as_given_each_for_its_own_tokens_and_priced_over_them(monkeypatch, tmp_path):
    """``requests`` (here ids; the zoo's multimodal prompts in the image bench) are sent as given, never
    through the chat template, each for its own ``new_tokens``, and each prompt is priced over its runs'
    tokens: the row's prediction equals the prompts priced one by one at their own lengths."""
    from specsim.check.engine_rows import EngineRun, engine_row

    sent = []

    class Given(FakeServer):
        def tokenize_chat(self, text):
            raise AssertionError("a given request is not re-tokenised")

        def complete(self, tokens, n):
            sent.append((tuple(tokens), n))
            return super().complete(tokens, n)

    monkeypatch.setattr(check_runs, "LlamaServer", Given)
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    lengths = dict(zip([t.prompt_id for t in entry.traces[:2]], (17, 33)))
    traces = tuple(replace(t, prompt_tokens=40, tokens=tuple(range(64))) for t in entry.traces[:2])
    entry = replace(entry, traces=traces)
    prompts = [TracedPrompt(p, "") for p in lengths]
    requests = {p: [7] * (40 + i) for i, p in enumerate(lengths)}
    settings = check_runs.check_settings("t.gguf", "d.gguf", 2, [3], None)
    kw = dict(threads=2, partial=tmp_path / "p.json", halfwidth=0.5, min_rounds=2, max_seconds=None)
    runs = check_runs.run_llama_check(
        None, settings, prompts, new_tokens=lengths, max_rounds=2, requests=requests, **kw
    )
    assert {(len(t), n) for t, n in sent} == {(40, 17), (41, 33)} and len(sent) == 2 * 2 * 2
    row = check_runs.llama_rows(profile, entry, runs, settings, 3)[0]
    one = []
    for p, n in lengths.items():
        base = {p: [EngineRun(p, 1.0, 100.0 * (n - 1), n)] * 2}
        c = runs.runs["draft:3"][p][0]
        sd = {p: [EngineRun(p, 1.0, c.predicted_ms, n, c.draft_n, c.draft_accepted)] * 2}
        one.append(engine_row(profile, entry, 3, base, sd, runtime="llama.cpp", reference_gamma=3))
    per_token = [(o.target_ms_per_token, o.sd_ms_per_token) for o in one]
    weights = [n - 1 for n in lengths.values()]
    base_ms = sum(w * b for w, (b, _) in zip(weights, per_token)) / sum(weights)
    sd_ms = sum(w * s for w, (_, s) in zip(weights, per_token)) / sum(weights)
    assert row.speedup_predicted == pytest.approx(base_ms / sd_ms, rel=1e-9)  # at the longest: 1.114


def test_the_serving_check_goes_on_to_the_halfwidth_side_by_side(monkeypatch, tmp_path):
    """After --min-rounds, a (rate, side) whose p50 TPOT, p90 TTFT or tokens/s is still wider than
    --halfwidth runs again, up to --max-rounds; one whose rounds agree stops (before the fix, every side ran
    --min-rounds rounds, however wide)."""
    from calibrate.llama_cpp import serve_check
    from calibrate.llama_cpp.check_runs import Setting
    from specsim.check.serve_comparison import ServedTimes, headline_halfwidth

    calls = {"base": 0, "sd": 0}

    def run_load(server, prompts, arrivals, n):
        calls[server.config] += 1
        # target-only steps 100 ms every round; SD's alternate 60 and 140 ms (wide)
        step = 0.1 if server.config == "base" else (0.06, 0.14)[calls["sd"] % 2]
        t = [float(a) for a in arrivals]
        stamps = tuple(tuple(a + step * (k + 1) for k in range(n)) for a in t)
        times = ServedTimes(
            tuple(t),
            tuple(s[0] for s in stamps),
            tuple(s[-1] for s in stamps),
            stamps,
            (3,) * len(t),
            (0,) * len(t),
        )
        return times, 0.0

    monkeypatch.setattr(serve_check, "LlamaServer", FakeServer)
    monkeypatch.setattr(serve_check, "run_load", run_load)
    settings = [Setting("target-only", "base"), Setting("draft:3", "sd")]
    kw = dict(rates=(0.5,), requests=3, new_tokens=4, seed=0, max_seconds=None)
    runs, done, _ = serve_check.run_serve_check(
        None, settings, [[1, 2]], min_rounds=2, max_rounds=5, halfwidth=0.05, partial=tmp_path / "p", **kw
    )
    assert done and calls == {"base": 2, "sd": 5}
    assert headline_halfwidth(runs["0.5@target-only"]) == 0.0 < 0.05 < headline_halfwidth(runs["0.5@draft:3"])


def test_the_serving_check_runs_every_round_interleaved_and_resumes(monkeypatch, tmp_path):
    """One call runs --min-rounds rounds, each (rate, side) once a round before any runs twice; a rerun
    after a stop goes on from the partial file (before the fix, one call ran one round only)."""
    from calibrate.llama_cpp import serve_check
    from calibrate.llama_cpp.check_runs import Setting
    from specsim.check.serve_comparison import ServedTimes

    order = []

    def run_load(server, prompts, arrivals, n):
        order.append(server.config)
        t = tuple(float(a) for a in arrivals)
        times = ServedTimes(t, t, t, tuple((a,) for a in t), (3,) * len(t), (0,) * len(t), 0, 0, 0)
        return times, 0.01

    monkeypatch.setattr(serve_check, "LlamaServer", FakeServer)
    monkeypatch.setattr(serve_check, "run_load", run_load)
    settings = [Setting("target-only", "base"), Setting("draft:3", "sd")]
    partial = tmp_path / "p.json"
    kw = dict(rates=(0.5, 2.0), requests=3, new_tokens=4, seed=0, partial=partial)
    rounds = dict(halfwidth=0.1, max_seconds=None)
    runs, done, share = serve_check.run_serve_check(
        None, settings, [[1, 2]], min_rounds=2, max_rounds=2, **rounds, **kw
    )
    assert done and share == pytest.approx(0.01)
    assert {k: len(v) for k, v in runs.items()} == {
        f"{r:g}@{s.label}": 2 for r in (0.5, 2.0) for s in settings
    }
    assert order == ["base", "sd", "base", "sd"] * 2
    # a third round asked for later: the partial's two are kept, one more each
    order.clear()
    runs, done, _ = serve_check.run_serve_check(
        None, settings, [[1, 2]], min_rounds=3, max_rounds=3, **rounds, **kw
    )
    assert done and len(order) == 4 and all(len(v) == 3 for v in runs.values())


def test_remeasure_runs_one_held_out_prompt_a_round_and_prices_the_step_and_blocks_from_them(
    monkeypatch, tmp_path
):
    """--remeasure: before each round one held-out prompt (in turn) runs target-only, at each draft-model γ
    and target-only again, resumable like the rest; the step and each run γ's block are then priced at the
    median of those runs beyond the grids' forwards, the other γ as calibrated; a held-out prompt that is
    also checked is refused."""
    from calibrate.llama_cpp import block_terms as bt
    from specsim.costs.grid_pass_cost import GridPassCost

    sent = []

    class Logged(FakeServer):
        def complete(self, tokens, n):  # 420 ms a step, 1000 ms a block: the stand-in profile's pace
            sent.append((self.config.draft_max or 0, n))
            out = super().complete(tokens, n)
            out["timings"]["predicted_ms"] *= 4.0 if self.config.draft_max else 4.2
            return out

    monkeypatch.setattr(check_runs, "LlamaServer", Logged)
    prompts = [TracedPrompt("a", "p0"), TracedPrompt("b", "p1")]
    held = (TracedPrompt("h0", "q0"), TracedPrompt("h1", "q1"))  # the same length: one residual each
    settings = check_runs.check_settings("t.gguf", "d.gguf", 2, [1, 3], NgramSimple(3, 6))
    kw = dict(new_tokens=32, threads=2, partial=tmp_path / "p.json", halfwidth=0.0, min_rounds=3)
    kw |= dict(max_seconds=None, held_out=held, held_tokens=64)
    check_runs.run_llama_check(None, settings, prompts, max_rounds=1, **kw)
    assert sent[:4] == [(0, 64), (1, 64), (3, 64), (0, 64)] and len(sent) == 4 + 2 * 4
    runs = check_runs.run_llama_check(None, settings, prompts, max_rounds=3, **kw)
    held_runs = {k: {p: len(v) for p, v in per.items()} for k, per in runs.runs.items() if "held" in k}
    assert held_runs["held-out target-only"] == {"h0": 4, "h1": 2} and held_runs["held-out draft:3"] == {
        "h0": 2,
        "h1": 1,
    }
    assert "held-out ngram-simple:3,6" not in held_runs and len(sent) == 3 * (4 + 2 * 4)
    samples = check_runs.held_out_runs(runs)
    assert sorted({s.gamma for s in samples}) == [0, 1, 3] and len(samples) == 3 * 4

    model = llama_like_profile().latency.cost_model
    new, terms = bt.remeasured_model(model, samples)
    cost = GridPassCost(model)
    step = bt.RunSample(0, 42, 63, 0, 0, 420.0 * 63)
    assert new.overhead_ms_per_target_step == pytest.approx(bt.run_residual_ms(cost, step, 0.0))
    per_token = max(model.overhead_ms_per_token, 0.0)
    block3 = bt.RunSample(3, 42, 63, 2 * 32, 31, 1000.0 * 32)  # 32 blocks, 2 drafts each
    ms = dict(zip(new.overhead_ms_per_block.gamma, (m for (m,) in new.overhead_ms_per_block.ms)))
    old = dict(zip(model.overhead_ms_per_block.gamma, (m for (m,) in model.overhead_ms_per_block.ms)))
    assert ms[3] == pytest.approx(bt.run_residual_ms(cost, block3, per_token))
    assert ms[2] == old[2] and ms[3] != old[3] and (terms.real_steps, terms.real_runs) == (6, 6)
    priced, line = check_runs.remeasured_profile(llama_like_profile(), runs)
    assert priced.latency.cost_model.overhead_ms_per_target_step == new.overhead_ms_per_target_step
    assert "re-measured between the check's 3 rounds" in priced.latency.provenance.notes
    assert line.endswith("on held-out prompts h0, h1") and "(6 runs)" in line
    with pytest.raises(Exception, match="overlap the checked ones"):
        check_runs.run_llama_check(None, settings, prompts, max_rounds=3, **(kw | {"held_out": prompts[:1]}))
