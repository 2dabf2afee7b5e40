"""predict / e2e / sweep against hand computations on a synthetic measured profile."""

import pytest

from specsim import SpecsimError
from specsim.e2e import request_latency
from specsim.latency import interp_curve, latency_ratios
from specsim.predict import predict
from specsim.profile import MethodAcceptance, Trace
from specsim.sweep import sweep
from specsim.tau import tau_at
from specsim.theory import alpha_from_tau, tau_iid


def test_measured_ratios(profile):
    c, v = latency_ratios(profile.latency, 4)
    assert c == pytest.approx(1.0 / 10.0)
    assert v == pytest.approx(18.0 / 10.0)
    c2, _ = latency_ratios(profile.latency, 4, batch_size=2)
    assert c2 == pytest.approx(0.11)
    assert latency_ratios(profile.latency, 4, textbook=True)[1] == 1.0


def test_interpolation_and_refusal(profile):
    curve = profile.latency.target_verify_ms_by_gamma
    assert interp_curve(curve, 2.5, name="Tv") == pytest.approx(15.0)
    with pytest.raises(SpecsimError, match="outside the measured range 1..8"):
        interp_curve(curve, 9, name="Tv")
    with pytest.raises(SpecsimError, match="outside the measured range"):
        latency_ratios(profile.latency, 12)


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
    entry = MethodAcceptance(method="X", scenario="s", images_per_prompt=0, gamma=4, tau=2.0,
                             traces=(Trace(match=(1, 1, 0, 1, 1, 1, 1, 0)),))
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
    entry = profile.acceptance[0]
    r = request_latency(profile, entry, 4, 100)
    target_prefill = 20 + (600 - 16) * (400 - 20) / (1024 - 16)
    draft_prefill = 2 + (600 - 16) * (40 - 2) / (1024 - 16)
    assert r.vision_ms == 30.0
    assert r.target_prefill_ms == pytest.approx(target_prefill)
    assert r.draft_setup_ms == pytest.approx(draft_prefill + 30.0)
    assert r.decode_ms == pytest.approx(100 / 2.5 * (4 * 1.0 + 18.0))
    plain = 30 + target_prefill + 100 * 10.0
    assert r.speedup == pytest.approx(plain / (30 + target_prefill + draft_prefill + 30 + 100 / 2.5 * 22.0))
    # prefill is not accelerated, so end-to-end is below the decode-phase speedup
    assert r.speedup < predict(profile, 4, methods=["M"])[0].speedup
    with pytest.raises(SpecsimError, match="new_tokens"):
        request_latency(profile, entry, 4, 0)


def test_sweep_best_gamma(profile):
    res = sweep(profile, range(1, 9), methods=["M"])[0]
    speeds = [p.speedup for p in res.predictions]
    assert res.best.gamma == speeds.index(max(speeds)) + 1
    assert res.to_json()["best_speedup"] == pytest.approx(max(speeds))
