"""Host checks that fire (issue 51): a noisy calibration says so with its threshold, rounds and the host's
load; a prediction from a profile measured on another CPU says so."""

import pytest

from specsim.cli.main import main
from specsim.hardware import host
from specsim.profiles import load_profile


def test_this_hosts_cpu_model_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n")
    assert host.cpu_model(str(info)) == "AMD EPYC 7B13"
    xeon = "Intel(R) Xeon(R) Processor"
    assert host.measured_cpu(f"cpu: {xeon} (2 logical CPUs)") == xeon
    assert host.measured_cpu("NVIDIA H100 80GB HBM3") is None


def test_a_profile_from_another_cpu_gets_a_note_and_one_from_this_cpu_none():
    zoo = load_profile("zoo-cpu")  # measured on a Xeon
    note = host.other_host_note(zoo, here="AMD EPYC")
    assert "'Intel(R) Xeon(R) Processor'" in note and "'AMD EPYC'" in note and "may not hold here" in note
    assert host.other_host_note(zoo, here="Intel(R) Xeon(R) Processor") is None
    assert host.other_host_note(load_profile("ibed-llava1.5-7b-68m"), here="AMD EPYC") is None  # no timings


@pytest.mark.parametrize("command", [["predict", "--gamma", "3"], ["sweep", "--gamma", "2,3", "--json"]])
def test_predict_and_sweep_warn_on_another_host(monkeypatch, capsys, command):
    """`predict --profile zoo-cpu` (a Xeon's) on an AMD EPYC printed 1.40x with no word; the host measured
    1.14x."""
    monkeypatch.setattr(host, "cpu_model", lambda *a: "AMD EPYC")
    assert main([*command, "--profile", "zoo-cpu", "--method", "M"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("specsim: warning: profile zoo-cpu's latency was measured on another CPU")
    assert err.count("\n") == 1
    monkeypatch.setattr(host, "cpu_model", lambda *a: "Intel(R) Xeon(R) Processor")
    assert main([*command, "--profile", "zoo-cpu", "--method", "M"]) == 0
    assert capsys.readouterr().err == ""


def test_a_noisy_calibration_names_its_threshold_rounds_and_load():
    pytest.importorskip("torch")
    from calibrate.measure import noise_check
    from calibrate.run.timing import Timing

    def timing(median, halfwidth, n=30):
        return Timing(median, spread_ms=halfwidth, n=n, halfwidth_ms=halfwidth, samples_ms=(median,))

    quiet = {"target_decode.r=1.c=8.b=1": timing(10.0, 0.2), "overhead.g=1.b=1.c=8": timing(0.1, 2.0)}
    assert noise_check.noisy_note(quiet, 30, 0.02) is None  # a derived overhead is not a pass
    busy = quiet | {"target_verify.r=3.c=8.b=1": timing(3.0, 6.99, n=30)}
    note = noise_check.noisy_note(busy, 30, 0.02)
    assert note.startswith("noisy calibration: 1 of 2 timed passes have a 95% half-width over 20%")
    assert "the worst 233% (target_verify.r=3.c=8.b=1, 30 samples; at most 30 repeats a point)" in note
    # the run's summary names the same pass: the derived overhead (2000 %) is no pass
    assert noise_check.worst_pass(busy) == ("target_verify.r=3.c=8.b=1", pytest.approx(6.99 / 3.0))
    assert "load average" in note and "CPUs" in note


def test_calibrate_latency_prints_the_noise_warning(tmp_path, capsys, monkeypatch):
    """The warning reaches the user: one stderr line, the profile still written."""
    pytest.importorskip("transformers")
    from calibrate.measure import noise_check
    from tests.test_calibrate_latency import FAST, _configs

    monkeypatch.setattr(noise_check, "NOISY_REL_HALFWIDTH", 0.0)  # any spread counts as noise
    t, d = _configs(tmp_path)
    out = tmp_path / "p.json"
    argv = ["calibrate", "latency", "--target-config", t, "--draft-config", d, "--out", str(out), *FAST]
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "noisy calibration" in line]
    assert len(err) == 1 and err[0].startswith("warning: noisy calibration: ") and "load average" in err[0]
    assert out.exists()


def test_a_profile_calibrated_on_a_contended_host_says_so_where_it_prices(monkeypatch, capsys, tmp_path):
    """The H200 LLaVA profile's sentinel moved +67 % while it was measured (its host_check says contended),
    and predict priced from it without a word; serve --cost-profile did the same for such a profile."""
    import json

    from specsim.profiles.loading import resolve_profile_path

    monkeypatch.setattr(host, "cpu_model", lambda *a: None)  # no other-CPU note: only this one
    assert main(["predict", "--profile", "llava-1.5-7b-68m-h200-hf", "--alpha", "0.7", "--gamma", "3"]) == 0
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "measured on a contended host" in err and "(+67.3%; threshold 10.1%)" in err
    )
    assert host.contended_note(load_profile("zoo-cpu")) is None
    doc = json.loads(resolve_profile_path("zoo-cpu-batch").read_text())
    doc["latency"]["cost_model"]["host_check"]["contended"] = True
    path = tmp_path / "contended.json"
    path.write_text(json.dumps(doc))
    argv = ["serve", "--cost-profile", str(path), "--alpha", "0.7", "--requests", "20", "--no-progress"]
    assert main([*argv, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("measured on a contended host" in n for n in notes)
