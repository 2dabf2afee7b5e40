"""`specsim check`: measured speedups with half-widths, predicted rows (pure), the tables, the CLI on tiny
models."""

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim.acceptance.replay import replay_traces_tau
from specsim.acceptance.theory import alpha_from_tau, tau_iid
from specsim.check.check_tables import check_table, error_rows, rounds_note, summary, terms_table
from specsim.check.comparison import (
    PromptSpec,
    RequestRun,
    check_row,
    measure,
    ratio_halfwidth,
    relative_error,
    textbook_speedup,
)
from specsim.cli.main import main
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.errors import SpecsimError
from specsim.profile_format import LatencySection, MethodAcceptance, Trace
from specsim.profiles import load_profile, save_profile
from tests.conftest import make_profile

TRACES = (
    Trace(match=(1, 1, 0, 1, 1, 1, 0, 0, 1, 1), prompt_id="a"),
    Trace(match=(0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1), prompt_id="b"),
)
SPECS = [PromptSpec("a", 100, 100, 0, 10), PromptSpec("b", 140, 140, 0, 12)]


def _entry(**kw):
    return MethodAcceptance(method="plain", scenario="s", images_per_prompt=0, traces=TRACES, **kw)


def _run(pid, ms, tokens=10, blocks=4, scale=1.0):
    return RequestRun(
        prompt_id=pid,
        setup_ms=0.0,
        first_ms=5.0 * scale,
        draft_ms=ms * 0.3 * scale,
        verify_ms=ms * 0.6 * scale,
        overhead_ms=ms * 0.1 * scale,
        tokens=tokens,
        first_tokens=1,
        blocks=blocks,
    )


def test_relative_error():
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    np.testing.assert_allclose(relative_error([2.0, 0.5], [1.0, 1.0]), [1.0, -0.5])


def test_ratio_halfwidth_matches_monte_carlo_coverage():
    """95% half-width: in repeated synthetic experiments the interval covers the true ratio ~95% of the
    time."""
    rng = np.random.default_rng(0)
    true_b, true_s = np.array([50.0, 80.0, 65.0]), np.array([30.0, 40.0, 45.0])
    cover = 0
    for _ in range(2000):
        shared = rng.normal(0, 0.02, size=(1, 4))  # machine state common to a round
        b = true_b[:, None] * (1 + shared + rng.normal(0, 0.02, (3, 4)))
        s = true_s[:, None] * (1 + shared + rng.normal(0, 0.02, (3, 4)))
        ratio = b.mean(1).sum() / s.mean(1).sum()
        cover += abs(ratio / (true_b.sum() / true_s.sum()) - 1) <= ratio_halfwidth(b, s)
    assert 0.92 <= cover / 2000 <= 0.98
    assert ratio_halfwidth(np.ones((2, 1)), np.ones((2, 1))) == float("inf")  # one round: no interval


def test_ratio_halfwidth_of_nothing_timed_is_unbounded_without_a_warning():
    """A decode phase of no tokens times 0 ms: the delta method divided by zero (a RuntimeWarning, NaN)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ratio_halfwidth(np.zeros((2, 3)), np.ones((2, 3))) == float("inf")
        assert ratio_halfwidth(np.ones((2, 3)), np.zeros((2, 3))) == float("inf")


def test_measure_reduces_runs_to_speedups_and_terms():
    base = {
        "a": [_run("a", 90.0, blocks=10), _run("a", 90.0, blocks=10)],
        "b": [_run("b", 110.0, tokens=12, blocks=12)] * 2,
    }
    sd = {"a": [_run("a", 45.0), _run("a", 47.0)], "b": [_run("b", 50.0, tokens=12, blocks=5)] * 2}
    m = measure(base, sd)
    assert m.tau == pytest.approx(22 / 9) and m.rounds == 2 and m.prompts == 2
    assert m.decode_speedup == pytest.approx((200 / 20) / (96 / 20))
    assert m.request_speedup == pytest.approx(210 / 106)
    assert m.terms_ms_per_block["verify"] == pytest.approx(0.6 * 96 / 7)
    assert m.terms_ms_per_block["target_step"] == pytest.approx((90 + 110) / (9 + 11))  # decode ms / steps
    assert 0 < m.decode_halfwidth < 0.05


def _measured(sd_ms: float, gamma: int):
    base = {p.prompt_id: [_run(p.prompt_id, 100.0, tokens=p.max_new_tokens)] * 2 for p in SPECS}
    sd = {
        p.prompt_id: [
            _run(p.prompt_id, sd_ms, tokens=p.max_new_tokens),
            _run(p.prompt_id, sd_ms * 1.01, tokens=p.max_new_tokens),
        ]
        for p in SPECS
    }
    return measure(base, sd)


def test_check_row_schema1_profile_prices_its_tables_at_one_context():
    """Schema-1 tables are a one-context cost model (Tp 10, Tq 1, Tv(γ) = 10 + 2γ at context 128, no
    overhead): each prompt's replayed blocks after the first cost g·Tq + Tv(g), target-only steps 10 ms."""
    prof = make_profile()
    row = check_row(prof, _entry(gamma=5, tau=2.4), 3, SPECS, _measured(60.0, 3))
    sd_ms = sd_tokens = base_tokens = 0.0
    for spec in SPECS:
        trace = next(t for t in TRACES if t.prompt_id == spec.prompt_id)
        after = greedy_plan(trace.match, 3, spec.max_new_tokens).after_first()
        g = after.drafts
        sd_ms += float(np.sum(np.where(g > 0, g * 1.0 + 10.0 + 2.0 * g, 10.0)))
        sd_tokens += after.tokens
        base_tokens += len(trace.match) - 1
    assert row.tau_predicted == pytest.approx(replay_traces_tau(TRACES, 3))
    assert row.speedup_predicted == pytest.approx(10.0 / (sd_ms / sd_tokens))
    c = 1.0 / 10.0
    assert row.speedup_textbook == pytest.approx(tau_iid(alpha_from_tau(2.4, 5), 3) / (3 * c + 1.0))
    assert row.request_speedup_predicted is not None and row.rounds == 2
    assert base_tokens > 0


def test_one_context_tables_answer_any_context_flagged():
    far = [PromptSpec("a", 10_000, 10_000, 0, 10), PromptSpec("b", 10_000, 10_000, 0, 12)]
    row = check_row(make_profile(), _entry(), 2, far, _measured(60.0, 2))
    assert "extrapolated" in row.notes


def test_textbook_speedup_at_reference_gamma_only_differs_by_v():
    assert textbook_speedup(2.5, 4, 4, 0.1) == pytest.approx(2.5 / (0.4 + 1.0))


def test_table_and_summary():
    prof = make_profile()
    rows = [
        check_row(prof, _entry(gamma=5, tau=2.4), g, SPECS, _measured(50.0 + 5 * g, g)) for g in (1, 2, 4)
    ]
    errs = error_rows(rows)
    s = summary(rows)
    assert s["max_abs_rel_err"] == pytest.approx(max(abs(e["speedup_rel_err"]) for e in errs))
    assert s["rows_within_halfwidth_goal"] <= 3 and "textbook_median_abs_rel_err" in s
    text = check_table(rows)
    assert "textbook" in text and "95% hw" in text and text.count("\n") == len(rows) + 3
    assert "ms per block after the first" in terms_table(rows)  # schema-1 rows are priced by term too
    with pytest.raises(SpecsimError):
        summary([])


def test_runs_past_the_traces_are_refused_not_compared():
    """A profile traced at 16 tokens checked at the default 64: the runs decoded 62 tokens, the replay
    priced 16, and a -31 % tau error was written into the profile as the model's."""
    prof = make_profile()
    longer = [replace(p, max_new_tokens=p.max_new_tokens + 4) for p in SPECS]
    base = {p.prompt_id: [_run(p.prompt_id, 100.0, tokens=p.max_new_tokens)] * 2 for p in longer}
    sd = {p.prompt_id: [_run(p.prompt_id, 60.0, tokens=p.max_new_tokens)] * 2 for p in longer}
    with pytest.raises(SpecsimError, match=r"16 new tokens, past the profile's greedy traces \(at most 12"):
        check_row(prof, _entry(gamma=5, tau=2.4), 2, longer, measure(base, sd))
    assert check_row(prof, _entry(gamma=5, tau=2.4), 2, SPECS, _measured(60.0, 2)).gamma == 2


def test_rounds_note_projects_the_widest_half_width():
    """A half-width of 4 % after 8 rounds of 30 s: 2 % needs 8·(4/2)² = 32 rounds, 16 min."""
    prof = make_profile()
    row = check_row(prof, _entry(gamma=5, tau=2.4), 2, SPECS, _measured(60.0, 2))
    rows = [replace(row, speedup_halfwidth=0.04), replace(row, speedup_halfwidth=0.01)]
    note = rounds_note(rows, 8, 240.0, 0.02)
    assert "widest half-width 4.0% after 8 rounds" in note and "about 32 rounds" in note and "~16 min" in note
    assert rounds_note(rows, 8, 240.0, 0.05) == "" and rounds_note(rows, 1, 30.0, 0.02) == ""
    assert rounds_note([replace(row, speedup_halfwidth=float("inf"))], 8, 240.0, 0.02) == ""


# --------------------------------------------------------------------------- CLI on tiny random models
TINY = {
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
    "initializer_range": 0.3,
}


@pytest.fixture
def tiny_files(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        '{"id": "x", "prompt": "def add(a, b):"}\n{"id": "y", "prompt": "Explain recursion."}\n'
    )
    prof = tmp_path / "prof.json"
    pair = replace(make_profile().provenance, target="tiny", draft="tiny")  # the models the runs load
    save_profile(make_profile(acceptance=(), provenance=pair), prof)
    return cfg, prompts, prof


def test_cli_acceptance_then_check(tiny_files, capsys):
    cfg, prompts, prof = tiny_files
    models = [
        "--target",
        str(cfg),
        "--draft",
        str(cfg),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "8",
        "--threads",
        "1",
        "--no-progress",
    ]
    assert main(["calibrate", "acceptance", *models, "--out", str(prof)]) == 0
    entry = load_profile(str(prof)).acceptance[0]
    assert entry.method == "plain" and entry.scenario == "p" and len(entry.traces) == 2
    assert not (prof.parent / "prof.json.partial.json").exists()
    capsys.readouterr()
    assert main(["check", "--profile", str(prof), "--gamma", "1,3", "--max-rounds", "2", *models]) == 0
    out = capsys.readouterr().out
    assert "trace replay == engine for 4/4" in out and "textbook" in out and "95% hw" in out
    checks = load_profile(str(prof)).checks
    assert [c.gamma for c in checks] == [1, 3]
    assert all(c.tau_measured == pytest.approx(c.tau_predicted) for c in checks)
    assert all(c.rounds == 2 and c.speedup_halfwidth is not None for c in checks)


def test_cli_errors(tiny_files, capsys):
    cfg, prompts, prof = tiny_files
    assert (
        main(["check", "--profile", str(prof), "--gamma", "0,2", "--target", str(cfg), "--draft", str(cfg)])
        == 2
    )
    assert "--gamma" in capsys.readouterr().err
    assert (
        main(["check", "--profile", str(prof), "--gamma", "2", "--target", str(cfg), "--draft", str(cfg)])
        == 2
    )
    assert "no acceptance entry" in capsys.readouterr().err
    bare = prompts.parent / "bare.json"
    save_profile(make_profile(latency=LatencySection()), bare)
    assert main(["check", "--profile", str(bare), "--target", str(cfg), "--draft", str(cfg)]) == 2
    assert "no latency section" in capsys.readouterr().err
    empty = prompts.parent / "empty.jsonl"
    empty.write_text("")
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                "--target",
                str(cfg),
                "--draft",
                str(cfg),
                "--prompts",
                str(empty),
                "--out",
                str(prof),
            ]
        )
        == 2
    )
    assert "empty" in capsys.readouterr().err
    other = dict(TINY, vocab_size=100)
    (prompts.parent / "other.json").write_text(json.dumps(other))
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                "--target",
                str(cfg),
                "--draft",
                str(prompts.parent / "other.json"),
                "--prompts",
                str(prompts),
                "--out",
                str(prof.with_name("new.json")),  # prof holds tiny/tiny's: refused first, before loading
            ]
        )
        == 2
    )
    assert "vocabular" in capsys.readouterr().err


def test_acceptance_resumes_from_partial_file(tiny_files, monkeypatch, capsys):
    import calibrate.measure.acceptance_traces as A

    cfg, prompts, prof = tiny_files
    argv = [
        "calibrate",
        "acceptance",
        "--target",
        str(cfg),
        "--draft",
        str(cfg),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "6",
        "--no-progress",
        "--out",
        str(prof),
    ]
    real, calls = A.acceptance_trace, []

    def flaky(*a, **kw):
        calls.append(a[2].prompt_id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(A, "acceptance_trace", flaky)
    assert main(argv) == 130
    assert (prof.parent / "prof.json.partial.json").is_file()
    monkeypatch.setattr(
        A, "acceptance_trace", lambda *a, **kw: calls.append(a[2].prompt_id) or real(*a, **kw)
    )
    assert main(argv) == 0
    assert calls == ["x", "y", "y"]  # the finished prompt was not redone
    assert len(load_profile(str(prof)).acceptance[0].traces) == 2


def test_other_host_names_the_device_and_thread_changes():
    from calibrate.measure.check_runs import other_host
    from specsim.profile_format import Provenance

    here = "cpu: Intel(R) Xeon(R) Processor (2 logical CPUs)"
    prov = Provenance(
        target="t",
        draft="d",
        device="cpu: AMD EPYC 7B13 (2 logical CPUs)",
        dtype="float32",
        date="2026-11-22",
        source="measured",
        threads=1,
    )
    why = other_host(prov, here, 1)
    assert why is not None and "AMD EPYC 7B13" in why and "Intel(R) Xeon(R)" in why and "thread(s)" not in why
    assert "2 thread(s)" not in why
    assert "with 1 thread(s), this run uses 2" in other_host(replace(prov, device=here), here, 2)
    assert other_host(replace(prov, device=here), here, 1) is None
    assert other_host(replace(prov, device="cpu"), here, 1) is None  # older profiles name no CPU model


def test_block_spread_reads_every_block_after_the_first_and_each_draft_step():
    """p50/p90/max by term over the blocks after each run's first, and the draft's first and later steps
    apart: a slow first step shows there, where a mean per block would spread it over the γ steps."""
    from calibrate.measure.check_runs import block_spread
    from calibrate.run.decode_records import BlockRecord

    def block(steps, verify):
        return BlockRecord(gamma=len(steps), accepted=0, emitted=1, draft_ms=sum(steps), verify_ms=verify,
                           block_ms=sum(steps) + verify + 1.0, draft_step_ms=tuple(steps))  # fmt: skip

    class Run:
        def __init__(self, blocks):
            self.blocks = blocks

    runs = [Run([block([50.0, 50.0], 90.0), block([20.0, 2.0], 10.0), block([22.0, 2.0], 12.0)]),
            Run([block([9.0, 9.0], 99.0), block([24.0, 4.0], 14.0)])]  # fmt: skip
    out = block_spread(runs)
    assert out["blocks"] == 3 and out["draft"]["n"] == 3  # the first blocks (the prompt's) left out
    assert out["draft"] == {"p50": 24.0, "p90": pytest.approx(27.2), "max": 28.0, "n": 3}
    assert out["draft_first_step"]["p50"] == 22.0 and out["draft_later_step"]["max"] == 4.0
    assert out["verify"]["p50"] == 12.0 and out["overhead"]["max"] == pytest.approx(1.0)
    assert block_spread([Run([block([1.0], 1.0)])]) == {"blocks": 0}


def test_the_batch_table_prints_the_rows_caveats_as_json_carries_them():
    """A batched row priced past its grid's cache widths said so in --json's notes and not in the text."""
    from specsim.check.check_tables import batch_table
    from specsim.profile_format import CheckRow

    kw = {"method": "M", "scenario": "zoo-1img", "tau_predicted": 2.0, "tau_measured": 2.0}
    kw |= {"speedup_predicted": 1.5, "speedup_measured": 1.1}
    note = "extrapolated: a cache width outside the batched grid"
    rows = [CheckRow(gamma=1, batch=b, notes=note if b > 1 else "", **kw) for b in (1, 2, 4)]
    text = batch_table(rows)
    assert text.splitlines()[-1] == f"note: {note} (batch 2 zoo-1img/M gamma 1, batch 4 zoo-1img/M gamma 1)"
    assert batch_table(rows[:1]).count("note:") == 0


def test_max_minutes_stops_a_check_only_once_min_rounds_have_run(capsys):
    """--min-rounds is 'at least this many rounds': --max-minutes stopped a check after one, whose rows then
    had no half-width."""
    pytest.importorskip("torch")
    argv = [
        "check",
        "--profile",
        "zoo-cpu",
        "--preset",
        "zoo",
        "--method",
        "M",
        "--gamma",
        "1",
        "--limit",
        "1",
    ]
    argv += ["--max-new-tokens", "32", "--max-minutes", "0.001", "--min-rounds", "2", "--max-rounds", "3"]
    assert main([*argv, "--threads", "1", "--json", "--no-write", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rounds"] == 2 and all(r["speedup_halfwidth"] is not None for r in out["rows"])
