"""predict / e2e / sweep against hand computations on a synthetic measured profile."""

from dataclasses import replace

import numpy as np
import pytest

from specsim import SpecsimError
from specsim.acceptance.theory import alpha_from_tau, tau_iid
from specsim.cli.main import main
from specsim.predict.prediction import predict
from specsim.predict.sweep import sweep
from specsim.predict.tau_at_gamma import tau_at
from specsim.profile_format import MethodAcceptance, Trace
from specsim.profile_format.cost_grid import grid_ms
from specsim.profiles import load_profile, shipped_profiles


def test_tables_become_a_one_context_cost_model(profile):
    """A schema-1 section's tables, read at the verify context (128), are the cost model's grids."""
    cost = profile.latency.cost_model
    assert profile.latency.cost_model_from_tables and "cost_model" not in profile.latency.to_json()
    assert grid_ms(cost.target_decode, 1, 128)[0] == pytest.approx(10.0)
    assert grid_ms(cost.target_verify, 5, 128)[0] == pytest.approx(18.0)
    assert grid_ms(cost.draft_next, 1, 128, 2)[0] == pytest.approx(1.1)
    rows = {r.method: r for r in predict(profile, 4)}
    assert rows["M"].c == pytest.approx(0.1) and rows["M"].v == pytest.approx(1.8)
    assert rows["MT"].c == pytest.approx(0.11)


def test_interpolation_and_refusal(profile):
    verify = profile.latency.cost_model.target_verify
    assert grid_ms(verify, 3.5, 128)[0] == pytest.approx(15.0)
    with pytest.raises(SpecsimError, match="outside the measured range 2..9"):
        grid_ms(verify, 10, 128)
    assert "outside the measured range" in predict(profile, 12, methods=["M"])[0].note


def test_predict_speedup_at_measured_gamma(profile):
    rows = {r.method: r for r in predict(profile, 4)}
    m = rows["M"]
    assert not m.extrapolated and m.tau == 2.5
    assert m.speedup == pytest.approx(2.5 / (4 * 0.1 + 1.8))
    assert m.target_ms_per_token == pytest.approx(10.0)
    assert m.tokens_per_s == pytest.approx(1000 * 2.5 / (4 * 1.0 + 18.0))
    assert rows["MT"].speedup == pytest.approx(2.8 / (4 * 0.11 + 1.8))


def test_predict_other_gamma_is_flagged(profile):
    m = predict(profile, 2, methods=["M"])[0]
    assert m.extrapolated and m.tau_source == "iid from gamma=4"
    assert m.tau == pytest.approx(tau_iid(alpha_from_tau(2.5, 4), 2))


def test_traces_take_precedence_over_iid():
    # matches 1,1,0,1 then the target token: with gamma=2 blocks start at 0 -> accept 2 (+1) ...
    entry = MethodAcceptance(
        method="X",
        scenario="s",
        images_per_prompt=0,
        gamma=4,
        tau=2.0,
        traces=(Trace(match=(1, 1, 0, 1, 1, 1, 1, 0)),),
    )
    tau, extrapolated = tau_at(entry, 2)
    assert not extrapolated
    # replay by hand: t=0 accept 2 -> emit 3 (t=3); t=3 accept 2 (t=3,4) -> emit 3 (t=6);
    # t=6 accept 1 (pos 6 match, pos 7 no) -> emit 2 (t=8, end): 8 tokens in 3 blocks
    assert tau == pytest.approx(8 / 3)


def test_selection_errors(profile):
    with pytest.raises(SpecsimError, match="unknown method 'Z'"):
        predict(profile, 4, methods=["Z"])
    with pytest.raises(SpecsimError, match="unknown scenario 'two'"):
        predict(profile, 4, scenario="two")
    assert len(predict(profile, 4, scenario="1img")) == 2


def test_end_to_end_latency_by_hand(profile):
    """N = 100 tokens in blocks of τ = 2.5 at γ = 4 from a 600-token prompt, the first pass fused with the
    prompt as the engine runs it: the target's over 600 + 4 rows, the draft's over its 600; the other 39
    blocks cost 4·Tq + Tv(4) = 22 ms; target-only: its prefill, then 99 steps of 10 ms."""
    prefill = lambda tokens, lo, hi: lo + (tokens - 16) * (hi - lo) / (1024 - 16)  # noqa: E731
    r = predict(profile, 4, methods=["M"], new_tokens=100)[0].end_to_end
    sd = prefill(604, 20, 400) + prefill(600, 2, 40) + 3 * 1.0 + 39 * 22.0
    assert r["vision_ms"] == 30.0 and r["draft_setup_ms"] == pytest.approx(30.0)
    assert r["target_prefill_ms"] == pytest.approx(prefill(600, 20, 400))
    assert r["plain_decode_ms"] == pytest.approx(99 * 10.0)
    assert r["decode_ms"] == pytest.approx(sd - prefill(600, 20, 400))
    plain = 30 + prefill(600, 20, 400) + 990.0
    assert r["speedup"] == pytest.approx(plain / (30 + 30 + sd))
    # prefill is not accelerated, so end-to-end is below the decode-phase speedup
    assert r["speedup"] < predict(profile, 4, methods=["M"])[0].speedup


def test_sweep_best_gamma_is_named_among_gammas_priced_from_their_own_evidence(profile):
    """τ measured at γ = 4 only: the other γ carry it by i.i.d. α, so no best γ is named (issue: the sweep
    used to crown γ = 5 of the IbED profile, its one measured γ); with traces every γ is replayed exactly."""
    res = sweep(profile, range(1, 9), methods=["M"])[0]
    assert res.best is None and res.to_json()["best_gamma"] is None
    assert res.best_note == "only gamma = 4 priced from its own evidence: no best gamma"
    traced = replace(
        profile,
        acceptance=(replace(profile.acceptance[0], gamma=None, tau=None, accepted_histogram=None,
                            traces=(Trace(match=(1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0) * 3),)),),
    )  # fmt: skip
    res = sweep(traced, range(1, 9), methods=["M"])[0]
    speeds = [p.speedup for p in res.predictions]
    assert res.best.gamma == speeds.index(max(speeds)) + 1 and res.best_note == ""
    assert res.to_json()["best_speedup"] == pytest.approx(max(speeds))


PRICED = [  # shipped profiles with acceptance, priced pass by pass (not a published ratio)
    n
    for n, p in ((n, load_profile(n)) for n in shipped_profiles())
    if p.acceptance and p.latency.published_ratio is None
]


@pytest.mark.parametrize("name", PRICED)
def test_a_priced_row_reproduces_its_speedup_from_its_own_columns(name, capsys):
    """On a profile priced pass by pass: speedup = decode tau / (d*c + v + o) and d*c + v + o = the block,
    exactly, in --json and in the printed table (the table divided whole-request tau by the block and
    multiplied c by the nominal gamma, off by up to 10 %: 2.704 / 1.777 = 1.52 printed beside 1.56)."""
    rows = [r for r in predict(load_profile(name), 3) if r.speedup is not None]
    assert rows
    for r in rows:
        assert r.speedup == pytest.approx(r.decode_tau / r.gamma_c_plus_v, rel=1e-9)
        assert r.gamma_c_plus_v == pytest.approx(r.drafts_per_block * r.c + r.v + r.o, rel=1e-9)
        assert 0 < r.drafts_per_block <= r.gamma + 1e-9
    assert main(["predict", "--profile", name, "--gamma", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["method", "tau"])
    assert header.split()[2:8] == ["d", "c", "v", "o", "d*c+v+o", "speedup"]


def test_the_tok_s_note_is_for_profiles_without_ms(capsys):
    """zoo-cpu has ms; at gamma 5 its rows are unpriced for another reason (their notes say which), and the
    table said the profile has no Tp."""
    assert main(["predict", "--profile", "zoo-cpu", "--gamma", "5", "--scenario", "zoo-1img"]) == 0
    out = capsys.readouterr().out
    assert "outside the measured range" in out and "tok/s needs absolute Tp" not in out
    assert main(["predict", "--gamma", "5"]) == 0  # IbED: published ratios, no ms
    assert "tok/s needs absolute Tp (ms); this profile has none" in capsys.readouterr().out


def test_a_sweep_compares_no_tree_on_a_profile_that_prices_one_gamma(capsys):
    """IbED prices gamma 5 only: a sweep's tree comparison printed n/a for the tree (and had read 'best γ = 5'
    above a sweep that says it names no best); it is refused, as predict's is."""
    assert main(["sweep", "--tree", "4,2,1", "--scenario", "ChartQA"]) == 2
    assert "--tree 4,2,1: profile 'ibed-llava1.5-7b-68m' gives gamma*c+v only" in capsys.readouterr().err


def test_a_one_context_profile_says_every_context_is_priced_at_it(capsys):
    """Its grids cannot be extrapolated along the context: the row is the same at 100 and 4000 tokens, and
    the note says why instead of claiming a linear extrapolation."""
    rows = []
    for ctx in ("100", "4000"):
        argv = ["predict", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu", "--alpha", "0.7", "--gamma", "3"]
        assert main([*argv, "--context-tokens", ctx]) == 0
        out = capsys.readouterr().out
        rows.append([line for line in out.splitlines() if line.startswith("  iid(alpha=0.7)")])
        assert "the grids hold one context (256 tokens), so every context is priced at it" in out
        assert "extrapolated (linear)" not in out
    assert rows[0] == rows[1]


def test_textbook_keeps_an_alpha_what_if_exact_at_every_gamma(capsys):
    """--textbook carried the --alpha what-if's τ 'iid from gamma=1' and marked γ ≥ 2 extrapolated, so no
    best γ was named, though τ = (1 − α^(γ+1)) / (1 − α) is the what-if itself at every γ."""
    import json

    assert main(["sweep", "--profile", "zoo-h200", "--alpha", "0.99", "--textbook", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["scenario"] == "what-if")
    # every gamma priced (v = 1 reads no Tv past the grid's): the best is the argmax of the row
    assert None not in row["speedup"] and not any(row["extrapolated"])
    assert row["best_gamma"] == row["gammas"][int(np.argmax(row["speedup"]))]
    assert row["tau"][4] == pytest.approx(tau_iid(0.99, 5))
