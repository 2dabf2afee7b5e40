"""The sampled check along the target's sampled paths: in a world where the target's greedy output is
far more draft-like than what it samples, β on the greedy output predicts the wrong τ, while the
acceptance along seeded sampled paths (``Trace.accept_paths``) gives intervals that cover real
speculative sampling — simulated here token by token with the rules of Leviathan et al. 2023 (draft
sampling, min(1, p/q) acceptance, residual resampling, bonus token), a second implementation of the
engine that never uses acceptance probabilities per position. Plus the profile contract of the field."""

import json

import numpy as np
import pytest

from specsim.check.check_tables import inside
from specsim.check.comparison import PromptSpec, RequestRun
from specsim.check.sampled import predict_sampled
from specsim.check.sampled_runs import acceptance_paths, check_sampling_entry, measure_sampled, replicate_runs
from specsim.errors import SpecsimError, SpecsimWarning
from specsim.profile_format import MethodAcceptance, Trace
from specsim.profiles import load_profile, save_profile
from tests.conftest import make_profile

# A 3-token Markov "language" (the state is the last token). The target's argmax is always token 0, and in
# state 0 the draft equals the target, so the greedy output (0, 0, 0, ...) is accepted everywhere; sampled
# runs also visit states 1 and 2, where the draft over-predicts token 0 (β = 0.45 there).
P = np.array([[0.5, 0.25, 0.25], [0.35, 0.33, 0.32], [0.35, 0.32, 0.33]])
Q = np.array([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05], [0.9, 0.05, 0.05]])
STARTS, N, GAMMA = (0, 1, 2), 24, 3


def _pick(row: np.ndarray, rng) -> int:
    return int(np.searchsorted(np.cumsum(row), rng.random() * row.sum()))


def sd_run(start: int, rng) -> tuple[int, int]:
    """(tokens, blocks) of one speculative-sampling run of N tokens from state ``start``."""
    out, state, blocks = 0, start, 0
    while out < N:
        g, blocks = min(GAMMA, N - out - 1), blocks + 1
        drafts, ctx = [], state
        for _ in range(g):
            ctx = _pick(Q[ctx], rng)
            drafts.append(ctx)
        ctx, emitted = state, 0
        for d in drafts:
            if rng.random() < min(1.0, P[ctx, d] / Q[ctx, d]):
                ctx, emitted = d, emitted + 1
                continue
            ctx, emitted = _pick(np.maximum(P[ctx] - Q[ctx], 0.0), rng), emitted + 1
            break
        else:
            ctx, emitted = _pick(P[ctx], rng), emitted + 1
        out, state = out + emitted, ctx
    return out, blocks


def calibration(paths: int, rng) -> MethodAcceptance:
    """What ``calibrate acceptance --sample-paths K`` measures in this world: β on the greedy output and,
    per sampled target path y, min(1, q(y_t) / p(y_t))."""
    traces = []
    for i, start in enumerate(STARTS):
        greedy, state = [], start
        for _ in range(N):
            greedy.append(float(np.minimum(P[state], Q[state]).sum()))
            state = int(np.argmax(P[state]))
        sampled = []
        for _ in range(paths):
            state, row = start, []
            for _ in range(N):
                y = _pick(P[state], rng)
                row.append(min(1.0, Q[state, y] / P[state, y]))
                state = y
            sampled.append(tuple(row))
        traces.append(
            Trace(beta=tuple(greedy), prompt_id=f"p{i}", accept_paths=tuple(sampled) if paths else None)
        )
    return MethodAcceptance(
        method="plain", scenario="s", images_per_prompt=0, traces=tuple(traces), notes="beta at T=1.0"
    )


def measurement(rng, rounds: int = 4):
    run = lambda i, tokens, blocks: RequestRun(f"p{i}", 0.0, 5.0, 1.0, 10.0, 0.0, tokens, 1, blocks)  # noqa: E731
    sd = {f"p{i}": [run(i, *sd_run(s, rng)) for _ in range(rounds)] for i, s in enumerate(STARTS)}
    base = {f"p{i}": [(run(i, N, N), run(i, N, N))] * rounds for i in range(len(STARTS))}
    return measure_sampled(base, sd)


SPECS = [PromptSpec(f"p{i}", 10, 10, 0, N) for i in range(len(STARTS))]


def _predict(entry, measured, seed):
    return predict_sampled(
        make_profile(), entry, GAMMA, SPECS, measured, rng=np.random.default_rng(seed), replicates=1000
    )


def test_sampled_paths_predict_real_speculative_sampling_and_greedy_beta_does_not():
    """Many paths: the Monte Carlo mean τ equals the engine's long-run τ (the model is exact); β on the
    greedy output (accepted everywhere here) predicts far more."""
    rng = np.random.default_rng(0)
    engine = measurement(rng, rounds=150)
    paths = _predict(calibration(200, rng), engine, 1)
    greedy = _predict(calibration(0, rng), engine, 1)
    assert paths.tau == pytest.approx(engine.tau, rel=0.025)
    assert inside(engine.tau, paths.tau_interval)
    assert greedy.tau > 1.3 * engine.tau and not inside(engine.tau, greedy.tau_interval)
    assert "sampled target paths" in paths.note and "greedy output (no sampled paths)" in greedy.note


def test_intervals_from_few_paths_cover_a_fresh_measurement():
    """Calibration (8 paths per prompt) and measurement (3 prompts × 4 seeds) both repeated: the 95%
    intervals hold about 95% of the time."""
    rng = np.random.default_rng(2)
    trials, hits = 60, 0
    for t in range(trials):
        entry = calibration(8, rng)
        m = measurement(rng)
        pred = _predict(entry, m, 100 + t)
        hits += inside(m.tau, pred.tau_interval)
    assert hits / trials >= 0.85


def test_replicates_resample_the_paths():
    """Each replicate's runs take paths of that replicate's resample only, so the share of runs on half the
    paths varies across replicates as a resample plus a draw (var ≈ 1/16 + 3/256 for K = 4 paths, 16 runs),
    not as a draw from fixed paths alone (1/64): the interval carries the error of estimating from K paths."""
    rng = np.random.default_rng(6)
    k, pool, count, reps = 4, 64, 16, 20000
    resample = rng.integers(0, k, size=(reps, k))
    idx = replicate_runs(rng, resample, pool, count)
    assert idx.shape == (reps, count) and idx.min() >= 0 and idx.max() < pool
    assert all(set(row % k) <= set(r) for row, r in zip(idx[:200], resample[:200]))
    share = (idx % k < 2).mean(1)
    assert share.mean() == pytest.approx(0.5, abs=0.01)
    assert share.var() == pytest.approx(1 / 16 + 3 / 256, rel=0.05)
    one = replicate_runs(np.random.default_rng(7), np.zeros((10, 1), dtype=int), pool, count)
    np.testing.assert_array_equal(one, np.random.default_rng(7).integers(0, pool, size=(10, count)))


def test_acceptance_paths_cut_or_continue_each_path():
    trace = Trace(beta=(0.5, 0.5, 0.5), accept_paths=((1.0, 0.0, 1.0, 1.0), (0.2, 0.4)))
    probs, longer = acceptance_paths(trace, 3)
    assert longer
    np.testing.assert_allclose(probs, [[1.0, 0.0, 1.0], [0.2, 0.4, 0.3]])
    probs, longer = acceptance_paths(Trace(beta=(0.5, 0.25)), 2)
    assert not longer and probs.tolist() == [[0.5, 0.25]]


def test_check_warns_without_paths():
    rng = np.random.default_rng(3)
    with pytest.warns(SpecsimWarning, match="greedy output only.*--sample-paths"):
        check_sampling_entry(calibration(0, rng), 1.0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_sampling_entry(calibration(2, rng), 1.0)


def test_accept_paths_round_trip_and_old_profiles_load(tmp_path):
    entry = calibration(3, np.random.default_rng(4))
    prof = make_profile(acceptance=(entry,))
    back = load_profile(str(save_profile(prof, tmp_path / "p.json"))).acceptance[0]
    np.testing.assert_allclose(back.traces[0].accept_paths, entry.traces[0].accept_paths)
    assert (
        load_profile(
            str(
                save_profile(
                    make_profile(acceptance=(calibration(0, np.random.default_rng(4)),)),
                    tmp_path / "old.json",
                )
            )
        )
        .acceptance[0]
        .traces[0]
        .accept_paths
        is None
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        ([[0.5, 1.5]], "traces[0].accept_paths[0][1]: expected <= "),
        ([[0.5], []], "traces[0].accept_paths[1]: expected a non-empty list"),
        ([], "traces[0].accept_paths: expected a non-empty list"),
        ([[0.5, None]], "traces[0].accept_paths[0][1]: expected a finite number"),
        ("0.5", "traces[0].accept_paths: expected a non-empty list"),
    ],
)
def test_bad_accept_paths_name_the_field(tmp_path, bad, message):
    d = json.loads(json.dumps(make_profile(acceptance=(calibration(2, np.random.default_rng(5)),)).to_json()))
    d["acceptance"][0]["traces"][0]["accept_paths"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecsimError) as err:
        load_profile(str(path))
    assert message in str(err.value)
