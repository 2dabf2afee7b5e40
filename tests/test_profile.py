"""Profile JSON: round trip, validation messages that name the field and value, atomic writes."""

import json

import pytest

from specsim import SpecsimError
from specsim.profile_format import Profile
from specsim.profiles import load_profile, save_profile, shipped_profiles
from tests.conftest import make_profile


def test_round_trip(tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    back = load_profile(str(path))
    assert back == profile
    assert json.loads(path.read_text())["schema_version"] == 3


def test_shipped_profiles_load():
    names = shipped_profiles()
    assert "ibed-llava1.5-7b-68m" in names
    for name in names:
        prof = load_profile(name)
        assert prof.provenance.source in ("measured",) or prof.provenance.source.startswith("published: ")


def _mutate(data: dict, path: list, value):
    d = data
    for key in path[:-1]:
        d = d[key]
    if value is KeyError:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (["schema_version"], 4, "schema_version: expected one of [1, 2, 3], got 4"),
        (["schema_version"], True, "schema_version: expected one of [1, 2, 3], got true"),
        (["provenance", "source"], "blog", "provenance.source: expected 'measured' or 'published"),
        (["provenance", "target"], KeyError, "provenance.target: missing"),
        (["provenance", "threads"], 0, "provenance.threads: expected an integer >= 1, got 0"),
        (
            ["latency", "target_decode_ms_by_context", "ms", 1],
            -3,
            "latency.target_decode_ms_by_context.ms[1]",
        ),
        (["latency", "target_decode_ms_by_context", "x"], [1024, 128], "strictly increasing"),
        (["latency", "target_verify_ms_by_gamma", "x", 0], 0.5, "integer gamma >= 1, got 0.5"),
        (["latency", "bogus"], 1, "unknown field 'bogus'"),
        (["acceptance", 0, "tau"], 9.0, "acceptance[0].tau: expected 1 <= tau <= gamma+1 = 5, got 9.0"),
        (["acceptance", 0, "tau"], "2.5", "acceptance[0].tau: expected a finite number, got '2.5'"),
        (
            ["acceptance", 0, "accepted_histogram"],
            [1, 2],
            "acceptance[0].accepted_histogram: expected gamma+1 = 5",
        ),
        (["acceptance", 0, "draft_batch_size"], 0, "acceptance[0].draft_batch_size"),
        (["acceptance", 1, "method"], "M", "duplicate entry for method 'M'"),
        (
            ["acceptance", 0, "traces"],
            [{"match": [1, 2]}],
            "acceptance[0].traces[0].match[1]: expected 0 or 1, got 2",
        ),
    ],
)
def test_validation_names_field_and_value(tmp_path, profile, path, value, expected):
    data = _mutate(profile.to_json(), path, value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(SpecsimError) as err:
        load_profile(str(bad))
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_and_missing_files(tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    text = path.read_text()
    trunc = tmp_path / "trunc.json"
    trunc.write_text(text[: len(text) // 2])
    with pytest.raises(SpecsimError, match="not valid JSON"):
        load_profile(str(trunc))
    with pytest.raises(SpecsimError, match="does not exist"):
        load_profile(str(tmp_path / "nope.json"))
    with pytest.raises(SpecsimError, match="unknown profile 'nope'"):
        load_profile("nope")


def test_save_is_atomic_and_validates(tmp_path, profile, monkeypatch):
    path = save_profile(profile, tmp_path / "p.json")
    before = path.read_text()
    import os

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)  # fails after the temp file is fully written
    with pytest.raises(OSError):
        save_profile(make_profile(name="other"), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temp file left behind


def test_with_acceptance_and_checks_replace_same_keys(profile):
    from specsim.profile_format import CheckRow, MethodAcceptance

    new = MethodAcceptance(method="M", scenario="one", images_per_prompt=1, gamma=4, tau=3.0)
    p2 = profile.with_acceptance([new])
    assert [a.tau for a in p2.acceptance if a.method == "M"] == [3.0]
    row = CheckRow(
        method="M",
        scenario="one",
        gamma=4,
        tau_predicted=2.5,
        tau_measured=2.4,
        speedup_predicted=1.5,
        speedup_measured=1.4,
    )
    p3 = p2.with_checks([row]).with_checks([row])
    assert len(p3.checks) == 1
    assert Profile.from_json(json.loads(json.dumps(p3.to_json()))) == p3


def test_every_shipped_profile_is_named_as_it_is_asked_for():
    """Errors name a profile by its ``name``: the H200 profiles shipped as 'llava7b', 'llama8b' and 'zoo',
    the stems their calibration wrote, so `--profile llava-1.5-7b-68m-h200-hf` answered about 'llava7b'."""
    from specsim.profiles import load_profile
    from specsim.profiles.loading import shipped_profiles

    shipped = shipped_profiles()
    assert len(shipped) >= 13
    assert {name: load_profile(name).name for name in shipped} == {name: name for name in shipped}
    assert all(load_profile(name).description for name in shipped)
