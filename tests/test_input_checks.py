"""Checks inside valid JSON and on arguments: ranges per unit, consistency, caps (one line, exit 2)."""

import json
import math
import warnings

import pytest

from specsim.acceptance.replay import replay_traces_tau
from specsim.cli.main import main
from specsim.errors import SpecsimError, SpecsimWarning
from specsim.hardware.device import load_device
from specsim.profiles import load_profile, save_profile


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def _load_mutated(tmp_path, profile, mutate):
    data = profile.to_json()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return load_profile(str(path))


def _error(tmp_path, profile, mutate) -> str:
    with pytest.raises(SpecsimError) as err:
        _load_mutated(tmp_path, profile, mutate)
    assert "\n" not in str(err.value)
    return str(err.value)


def _set(path, value):
    def mutate(data):
        d = data
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value

    return mutate


# --------------------------------------------------------------------------- structure and ranges
@pytest.mark.parametrize("bad", [None, [1, 0], "1,0", 3])
def test_non_object_trace_names_the_field(tmp_path, profile, bad):
    message = _error(tmp_path, profile, _set(["acceptance", 0, "traces"], [{"match": [1, 0]}, bad]))
    assert "acceptance[0].traces[1]: expected an object" in message


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (
            ["latency", "target_decode_ms_by_context", "ms", 0],
            5e-324,
            "target_decode_ms_by_context.ms[0]: expected a value in",
        ),
        (
            ["latency", "target_decode_ms_by_context", "ms", 0],
            1e300,
            "ms[0]: expected a value in 1e-06..1e+08 (ms)",
        ),
        (
            ["latency", "target_decode_ms_by_context", "x", 1],
            1e12,
            "x[1]: expected a value in 0..16777216 (tokens)",
        ),
        (
            ["latency", "target_verify_ms_by_gamma", "x", 7],
            2000,
            "target_verify_ms_by_gamma.x[7]: expected a value in 1..1024",
        ),
        (
            ["latency", "vision_encoder_ms_per_image"],
            1e-300,
            "vision_encoder_ms_per_image: expected a value in 0 or",
        ),
        (["acceptance", 0, "gamma"], 2**63 - 1, "acceptance[0].gamma: expected a value in 1..1024 (gamma)"),
        (
            ["acceptance", 0, "draft_prompt_tokens"],
            1e30,
            "draft_prompt_tokens: expected a value in 0..16777216",
        ),
        (["schema_version"], True, "profile.schema_version: expected one of [1, 2, 3], got true"),
        (["schema_version"], 1.0, "profile.schema_version: expected one of [1, 2, 3], got 1.0"),
    ],
)
def test_implausible_values_name_the_field_and_range(tmp_path, profile, path, value, expected):
    assert expected in _error(tmp_path, profile, _set(path, value))


# --------------------------------------------------------------------------- consistency
def test_tau_must_agree_with_histogram_and_traces(tmp_path, profile):
    assert "acceptance[0].tau: 2.9 disagrees with accepted_histogram, which gives tau = 2.5000" in _error(
        tmp_path, profile, _set(["acceptance", 0, "tau"], 2.9)
    )
    assert _load_mutated(tmp_path, profile, _set(["acceptance", 0, "tau"], 2.504)).acceptance[0].tau == 2.504

    match = [1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1]
    tau = replay_traces_tau([match], 4)

    def with_traces(tau_given, hist=None):
        def mutate(data):
            entry = data["acceptance"][0]
            entry.update(tau=tau_given, traces=[{"match": match}])
            entry.pop("accepted_histogram")
            if hist is not None:
                entry["accepted_histogram"] = hist

        return mutate

    assert _load_mutated(tmp_path, profile, with_traces(tau)).acceptance[0].traces[0].match == tuple(match)
    assert f"disagrees with its traces, which replay to tau = {tau:.4f} at gamma=4" in _error(
        tmp_path, profile, with_traces(tau + 0.2)
    )
    assert (
        "accepted_histogram: [0, 1, 1, 0, 1] disagrees with its traces, which replay to [3, 0, 1, 0, 1]"
        in _error(tmp_path, profile, with_traces(None, [0, 1, 1, 0, 1]))
    )


def test_adaptive_tau_must_agree_with_the_block_by_block_replay(tmp_path, profile):
    """An adaptive ensemble's τ is what its weights, re-run per block, give; its per-token ``match`` (all hits
    here, while a rival outweighs the target's token at positions 2 and 6) is not the record."""
    from specsim.draft_shapes.adaptive import AdaptiveTrace, replay_at
    from specsim.profile_format import Trace

    n, wrong = 9, {2, 6}
    adaptive = AdaptiveTrace(
        prior=(0.5, 0.5),
        target_probs=tuple((0.1, 0.2) if t in wrong else (0.8, 0.6) for t in range(n)),
        rival_probs=tuple(((0.7, 0.5),) if t in wrong else ((0.1, 0.2),) for t in range(n)),
        member_match=tuple((0, 0) if t in wrong else (1, 1) for t in range(n)),
    )
    trace = Trace(match=(1,) * n, adaptive=adaptive)
    tau, hist = replay_at([trace], 4)
    # blocks at t = 0, 3, 7: 2 drafts kept (miss at 2), 3 kept (miss at 6), the last capped to 1 draft
    assert tau == 3.0 and list(hist) == [0, 1, 1, 1, 0]
    assert replay_traces_tau([trace.match], 4) == 4.5

    def with_tau(tau_given, hist_given):
        def mutate(data):
            data["acceptance"][0].update(
                tau=tau_given, accepted_histogram=hist_given, traces=[trace.to_json()]
            )

        return mutate

    assert _load_mutated(tmp_path, profile, with_tau(tau, [int(h) for h in hist])).acceptance[0].tau == tau
    match_tau = replay_traces_tau([trace.match], 4)
    assert f"disagrees with its traces, which replay to tau = {tau:.4f} at gamma=4" in _error(
        tmp_path, profile, with_tau(match_tau, None)
    )


@pytest.mark.parametrize(
    "weights, expected",
    [
        ([1.0], "weights: expected one weight per ensemble member (draft_batch_size = 2), got 1"),
        ([1.0, 1.0, 1.0], "(draft_batch_size = 2), got 3"),
        ([0.0, 0.0], "weights: expected at least one weight > 0, got all zeros"),
    ],
)
def test_ensemble_weights(tmp_path, profile, weights, expected):
    assert expected in _error(tmp_path, profile, _set(["acceptance", 1, "weights"], weights))


def test_block_cost_below_one_is_refused(tmp_path, profile):
    def mutate(data):
        data["latency"]["block_cost"] = {"gamma": 5, "gamma_c_plus_v": 0.5, "derivation": "test"}

    assert "block_cost.gamma_c_plus_v: expected >= 1" in _error(tmp_path, profile, mutate)


def test_draft_vision_without_images_warns(tmp_path, profile):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        no_images, own_scenario = (
            _set(["acceptance", 0, "images_per_prompt"], 0),
            _set(["acceptance", 0, "scenario"], "text"),
        )
        _load_mutated(
            tmp_path, profile, lambda d: (no_images(d), own_scenario(d))
        )  # a text scenario of its own
    assert [str(w.message) for w in caught if w.category is SpecsimWarning] == [
        "acceptance[0]: uses_draft_vision is true but images_per_prompt is 0, so no draft vision cost is "
        "charged; is the entry mislabeled?"
    ]


# --------------------------------------------------------------------------- device files
def _device(tmp_path, **changes) -> str:
    data = load_device("h100-sxm").to_json()
    for key, value in changes.items():
        if key in data and isinstance(data[key], dict):
            data[key]["value"] = value
        else:
            data[key] = value
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data, allow_nan=True))
    with pytest.raises(SpecsimError) as err:
        load_device(str(path))
    return str(err.value)


def test_one_scenario_is_one_image_count(tmp_path, profile):
    err = _error(tmp_path, profile, _set(["acceptance", 0, "images_per_prompt"], 0))
    assert "scenario 'one'" in err and "one scenario is one workload" in err


def test_device_values_out_of_range(tmp_path):
    assert (
        "memory_bandwidth_bytes_per_s.value: expected a value in 1e+06..1e+16 (bytes_per_s), got 1e-300"
        in _device(tmp_path, memory_bandwidth_bytes_per_s=1e-300)
    )
    assert "peak_flops_per_s.value: expected a value in" in _device(tmp_path, peak_flops_per_s=5e-324)
    assert "NaN is not a JSON number" in _device(tmp_path, price_per_hour_usd=math.nan)
    assert "price_per_hour_usd.value: expected a value in 0..1e+06 (usd_per_hour), got 1e+300" in _device(
        tmp_path, price_per_hour_usd=1e300
    )
    assert "schema_version: expected 1, got True" in _device(tmp_path, schema_version=True)


def test_user_device_with_measure_true_is_refused(tmp_path):
    message = _device(tmp_path, measure=True)
    assert "\"measure\": true is only for the shipped 'cpu' entry" in message


# --------------------------------------------------------------------------- arguments
def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["predict", "--gamma", "5", "--context-tokens", "nan"],
            "argument --context-tokens: expected a finite number",
        ),
        (
            ["predict", "--gamma", "5", "--context-tokens", "inf"],
            "argument --context-tokens: expected a finite number",
        ),
        (["predict", "--gamma", str(2**63 - 1)], "--gamma: expected at most 1024 (the cap on gamma)"),
        (["predict", "--gamma", "5", "--new-tokens", "10" * 10], "--new-tokens: expected at most 16777216"),
        (["sweep", "--gamma", "1-10000000000"], "--gamma: expected values <= 1024 (the cap on gamma)"),
        (["hardware", "--batch", "1-100000"], "--batch: expected values <= 4096 (the cap on batch)"),
        (
            ["hardware", "--context", "1-1000000000"],
            "--context: expected values <= 16777216 (the cap on tokens)",
        ),
        (
            ["hardware", "--batch", "1-512", "--context", "1-256", "--device", "h100-sxm"],
            "rows; expected at most 65536",
        ),
        (["hardware", "--gamma-max", "100000"], "--gamma-max: expected at most 1024"),
        (["predict", "--gamma"], "predict: argument --gamma: expected one argument"),
    ],
)
def test_bad_arguments_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err
    assert err.count("\n") == 1 and err.startswith("specsim: error: ")


def test_hardware_plot_path_is_checked_before_work(capsys, tmp_path, monkeypatch):
    import specsim.cli.cmd_hardware as hcli

    monkeypatch.setattr(hcli, "answer", lambda *a, **k: pytest.fail("planned before checking --plot"))
    code, out, err = run(capsys, "hardware", "--device", "h100-sxm", "--plot", str(tmp_path))
    assert code == 2 and "--plot" in err and "is a directory" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [["hardware", "--device", "h100-sxm", "--plot"], ["validate", "--plot"], ["validate", "--sweep-plot"]],
)
def test_plot_paths_must_say_png(capsys, tmp_path, argv):
    """A plot is written as PNG: a name that says otherwise is refused before any work, and nothing is
    written."""
    code, out, err = run(capsys, *argv, str(tmp_path / "speedup.pdf"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "expected a .png file name" in err
    assert not any(tmp_path.iterdir())
    assert run(capsys, *argv, str(tmp_path / "speedup.PNG"))[0] == 0


def test_json_outputs_are_strict(capsys, tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    for argv in (
        ["predict", "--gamma", "4", "--profile", str(path), "--json", "--new-tokens", "64"],
        ["sweep", "--gamma", "1-8", "--profile", str(path), "--json"],
        ["profiles", "--json"],
        ["hardware", "--device", "h100-sxm", "--json"],
        ["predict", "--gamma", "5", "--json", "--textbook"],
    ):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and _strict(out)
