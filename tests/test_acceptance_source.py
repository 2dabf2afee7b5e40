"""One acceptance source for every command (``specsim.predict.acceptance_source``): each spec's τ(γ), its
serving draws (whose mean acceptance length is that τ), and ``serve``, ``hardware``, ``recommend``, the tuner
and calibrate's synthetic schedules reading it the same way: imported engine counters (a histogram at K, no
traces), per-position rates, a given τ or α, greedy traces."""

import json
from pathlib import Path

import numpy as np
import pytest

from specsim.acceptance.theory import alpha_from_tau, tau_iid
from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.predict.acceptance_source import parse_acceptance
from specsim.predict.tau_at_gamma import extrapolated
from specsim.serve.speculation import serving_source

ROOT = Path(__file__).resolve().parents[1]
SCRAPE = ROOT / "notebooks" / "data" / "engines" / "vllm_scrape_2.prom"  # K = 5, 4200 blocks
COUNTS = (1080, 740, 590, 470, 380, 940)  # blocks that accepted exactly k of 5


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> str:
    """A profile of imported vLLM counters only: a histogram at K = 5, no traces, no τ."""
    out = tmp_path_factory.mktemp("imp") / "imported.json"
    argv = ["import", "vllm", str(SCRAPE), "--method", "M", "--scenario", "chat", "--out", str(out)]
    assert main(argv) == 0
    return str(out)


def test_each_form_gives_its_tau_and_says_where_it_came_from(imported):
    survival = np.cumsum(COUNTS[::-1])[::-1][1:] / sum(COUNTS)
    cases = {  # spec: (γ, τ, extrapolated)
        "0.7": (4, tau_iid(0.7, 4), False),
        "alpha:0.5": (2, 1.75, False),
        "tau:2.6@3": (3, 2.6, False),
        "tau:ibed-llava1.5-7b-68m:M/ChartQA": (5, 2.24, False),
        "positions:0.8,0.5": (2, 1 + 0.8 + 0.4, False),
        f"profile:{imported}": (3, 1 + survival[:3].sum(), False),
    }
    for spec, (gamma, tau, extra) in cases.items():
        got, source = parse_acceptance(spec).tau_with_source(gamma)
        assert got == pytest.approx(tau) and extrapolated(source) == extra, spec
    past, source = parse_acceptance("tau:2.6@3").tau_with_source(5)
    assert extrapolated(source) and past == pytest.approx(tau_iid(alpha_from_tau(2.6, 3), 5))
    assert extrapolated(parse_acceptance(f"profile:{imported}").tau_with_source(7)[1])


@pytest.mark.parametrize(
    "spec", ["xyz", "1.5", "tau:9@3", "tau:2@0", "positions:1.2", "positions:", "traces:ibed-llava1.5-7b-68m"]
)
def test_bad_specs_name_the_option_and_the_value(spec):
    with pytest.raises(SpecsimError, match="^--acceptance"):
        parse_acceptance(spec)


def test_tau_of_every_draft_accepted_holds_up_to_its_gamma_only(capsys):
    """tau:3@2 is an alpha of 1 (which no --alpha takes): hardware carried it to tau 9 at gamma 8, 5.6x. Below
    its gamma it is exact (a block accepted whole accepted its first drafts), and recommend, which searches
    1..K, was refused with a hint it has no option for ('price gamma 2 alone')."""
    given = parse_acceptance("tau:3@2")
    assert given.tau_with_source(2) == (3.0, "--tau") and given.tau_with_source(1) == (2.0, "--tau")
    with pytest.raises(
        SpecsimError, match="gamma 5 was asked: price gammas up to 2 \\(--gamma or --gamma-max"
    ):
        given.tau_with_source(5)
    argv = ["hardware", "--device", "h100-sxm", "--batch", "1", "--acceptance", "tau:3@2"]
    assert (
        main(argv) == 2 and "(every draft accepted) says nothing of longer blocks" in capsys.readouterr().err
    )
    assert main([*argv, "--gamma", "2"]) == 0 and main([*argv, "--gamma-max", "2"]) == 0
    rec = ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--batch", "1", "--json"]
    assert main([*rec, "--acceptance", "tau:6@5"]) == 0  # gamma 1..5 searched, K = 5
    capsys.readouterr()


@pytest.mark.parametrize("gamma", [2, 5, 8])
def test_serving_draws_have_the_tau_every_command_prints(imported, gamma):
    """The mean accepted + 1 of 200 000 serving blocks is the spec's τ(γ), below K exactly (a histogram's
    survival) and past it by the same i.i.d. carry the planner prints."""
    for spec in ("0.6", "tau:2.6@3", "positions:0.9,0.7,0.5", f"profile:{imported}"):
        acc = parse_acceptance(spec)
        draws = serving_source(acc).accepted_steps(2000, gamma, 100, np.random.default_rng(1))
        assert 1 + draws.mean() == pytest.approx(acc.tau_with_source(gamma)[0], abs=0.015), (spec, gamma)


def _json(capsys, argv) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_serve_takes_imported_counters_and_a_tau(imported, capsys):
    """serve refused a profile without greedy traces ('no greedy traces to replay') and had no --tau."""
    base = ["serve", "--rate", "4", "--requests", "400", "--gamma", "3", "--no-progress", "--json"]
    counted = _json(capsys, [*base, "--acceptance-profile", imported])
    assert counted["acceptance"] == "accepted-length histogram of M/chat at K=5"
    tau3 = 1 + (3120 + 2380 + 1790) / 4200
    assert counted["comparison"]["sd"]["mean_acceptance_length"] == pytest.approx(tau3, abs=0.05)
    given = _json(capsys, [*base, "--tau", "2.6"])
    assert given["comparison"]["sd"]["mean_acceptance_length"] == pytest.approx(2.6, abs=0.05)
    spec = _json(capsys, [*base, "--acceptance", f"profile:{imported}"])
    assert spec["comparison"] == counted["comparison"]  # one source, whichever option names it
    assert main([*base, "--tau", "2.6", "--alpha", "0.5"]) == 2
    assert "--alpha/--tau: give one acceptance source, not 2" in capsys.readouterr().err


def test_hardware_recommend_and_serve_read_one_tau(imported, capsys):
    """The same spec gives hardware and recommend the same τ(3), and serve draws it."""
    spec = "positions:0.9,0.7,0.5,0.4"
    tau3 = 1 + 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.5
    models = ["--pair", "llava-1.5-7b-68m", "--device", "h100-sxm"]
    hw = _json(capsys, ["hardware", *models, "--acceptance", spec, "--gamma", "3", "--batch", "1", "--json"])
    assert hw["plan"]["rows"][0]["tau"] == pytest.approx(tau3)
    rec = ["recommend", "--engine", "vllm", *models, "--acceptance", spec, "--batch", "1", "--json"]
    rec = _json(capsys, rec)
    row = rec["table"][0]
    assert row["tau"] == pytest.approx(parse_acceptance(spec).tau_with_source(row["best_gamma"])[0])
    assert rec["profile"] is None and rec["measured_gamma"] == 4 and row["best_gamma"] <= 4
    served = _json(capsys, ["serve", *models, "--acceptance", spec, "--gamma", "3", "--requests", "400",
                            "--no-progress", "--json"])  # fmt: skip
    assert served["comparison"]["sd"]["mean_acceptance_length"] == pytest.approx(tau3, abs=0.05)


def test_the_tuner_and_synthetic_schedules_read_the_same_specs():
    from calibrate.measure.synthetic_schedules import parse_schedule
    from specsim.tune.space import parse_draft_option

    assert parse_draft_option("llava-1.5-68m@positions:0.9,0.6").acceptance == "positions:0.9,0.6"
    assert parse_draft_option("llava-1.5-68m@tau:2.6@3").acceptance == "tau:2.6@3"
    assert parse_schedule("tau:2.6@3").rates == (parse_acceptance("tau:2.6@3").alpha,)
    ibed = parse_acceptance("tau:ibed-llava1.5-7b-68m:M/ChartQA").alpha
    assert parse_schedule("tau:ibed-llava1.5-7b-68m:M/ChartQA").rates == (ibed,)


def test_recommend_with_another_pairs_profile_says_so_and_names_the_priced_draft(capsys, tmp_path):
    """recommend --profile ibed-llava1.5-7b-68m --target <qwen>: a note, and the config names the qwen draft
    priced, not LLaVA's (it named the profile's draft silently)."""
    argv = ["recommend", "--engine", "vllm", "--profile", "ibed-llava1.5-7b-68m", "--method", "M"]
    argv += ["--scenario", "ChartQA", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--json"]
    out = _json(capsys, argv)
    assert any("its tau is borrowed" in n and "ibed-llava1.5-7b-68m" in n for n in out["notes"])
    assert out["config"]["model"] == "meta-llama/Llama-3.2-1B-Instruct"  # the priced draft, by its hub id
    assert "68m" not in json.dumps(out["config"])
    own = _json(capsys, argv[:-5] + ["--pair", "llava-1.5-7b-68m", "--json"])
    assert not any("borrowed" in n for n in own["notes"])


def test_hardware_with_another_pairs_profile_says_its_tau_is_borrowed(capsys):
    argv = ["hardware", "--profile", "ibed-llava1.5-7b-68m", "--target", "llama-3.1-8b", "--draft"]
    argv += ["llama-3.2-1b", "--device", "h100-sxm", "--batch", "1", "--context", "512"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "acceptance of profile ibed-llava1.5-7b-68m was measured on llava-1.5-7b" in out
    assert main(["hardware", "--pair", "llava-1.5-7b-68m", "--device", "h100-sxm", "--batch", "1"]) == 0
    assert "borrowed" not in capsys.readouterr().out


def test_per_position_rates_carried_past_k_never_rise():
    """Rates 0.9, 0.8, 0.5 at γ = 5: the measured a_3 = 0.36 bounds a_4 and a_5, so τ(5) <= 1 + 0.9 + 0.72 +
    3 x 0.36 = 3.70; carrying τ(3) on an i.i.d. curve gave 3.73 (its a_4 = α^4 rose above a_3). Past K each
    draft is accepted at τ(3)'s α: a_{3+j} = a_3·α^j, in the planner's τ and in the server's draws alike."""
    from specsim.acceptance.theory import survival_past

    acc = parse_acceptance("positions:0.9,0.8,0.5")
    alpha = alpha_from_tau(1 + 0.9 + 0.72 + 0.36, 3)
    tau5, source = acc.tau_with_source(5)
    assert tau5 == pytest.approx(1 + 0.9 + 0.72 + 0.36 * (1 + alpha + alpha**2)) and tau5 <= 3.70
    assert extrapolated(source) and acc.tau_with_source(3) == (pytest.approx(2.98), "--acceptance positions")
    curve = survival_past([0.9, 0.72, 0.36], alpha, 8)
    assert np.all(np.diff(curve) <= 0) and curve[:3] == pytest.approx([0.9, 0.72, 0.36])
    draws = serving_source(acc).accepted_steps(20000, 5, 1, np.random.default_rng(0))[0]
    assert 1 + draws.mean() == pytest.approx(tau5, abs=0.02)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--alpha", "0.7", "--method", "ZZ"], "--method: picks tau out of a profile; --alpha gives it"),
        (
            ["--alpha", "0.7", "--profile", "nosuch"],
            "--profile: picks tau out of a profile; --alpha gives it",
        ),
        (["--tau", "2", "--gamma", "3", "--scenario", "x"], "--scenario: picks tau out of a profile; --tau"),
        (
            ["--acceptance", "alpha:0.7", "--method", "M"],
            "--method: picks tau out of a profile; --acceptance",
        ),
    ],
)
def test_hardware_refuses_profile_choices_beside_a_given_acceptance(capsys, extra, named):
    """--profile, --method and --scenario choose tau from a profile: beside --alpha, --tau or --acceptance
    they changed nothing (an unknown method or profile passed without a word)."""
    assert main(["hardware", "--pair", "llava-1.5-7b-68m", "--batch", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err


@pytest.mark.parametrize(
    "argv, want",
    [
        (
            ["hardware", "--device", "h100-sxm", "--batch", "1", "--method", "M", "--method", "T"],
            "--scenario 5img: names 2 scenarios (PororoSV, VIST), and the plan takes one tau per method",
        ),
        (
            ["recommend", "--engine", "vllm", "--profile", "ibed-llava1.5-7b-68m", "--method", "M"],
            "found 2 (M/PororoSV, M/VIST); --scenario 5img names a group of scenarios: give one of them",
        ),
    ],
)
def test_a_scenario_group_is_refused_where_one_tau_per_method_is_read(capsys, argv, want):
    """hardware printed each method twice, unlabelled, its batch table's columns shifted, and its JSON kept
    one scenario; recommend asked for --method and --scenario, both given."""
    assert main([*argv, "--scenario", "5img"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and want in err


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["hardware", "--device", "l4", "--fit-profile", "{p}"], "--fit-profile"),
        (["serve", "--cost-profile", "{p}", "--alpha", "0.7"], "--cost-profile"),
    ],
)
def test_a_profile_of_imported_acceptance_says_it_has_no_timings_first(imported, capsys, argv, flag):
    """A profile holding imported counters alone asked for --pair, then --fit-device, then --fit-dtype, before
    saying it has no latency points; predict asked for --context-tokens, which could not price either."""
    assert main([a.replace("{p}", imported) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim: error: {flag}: profile 'imported': latency: no timings to price")
    assert main(["predict", "--profile", imported, "--gamma", "5"]) == 0
    out = capsys.readouterr().out
    assert "note: latency: no timings to price forwards with" in out and "--context-tokens" not in out
