"""Device names are case-insensitive and have aliases (nvidia-smi's names, short names); a name that fits
several catalog entries with different numbers is refused with the candidates; unknown names keep their
one-line error listing the catalog. And ``calibrate cpu-device --json``, the command that writes a device."""

import json

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware.device import (
    AMBIGUOUS_DEVICE_NAMES,
    DEVICE_ALIASES,
    catalog_names,
    load_device,
    load_devices,
    resolve_device_name,
)


def test_every_alias_and_candidate_is_a_catalog_entry():
    names = set(catalog_names())
    assert set(DEVICE_ALIASES.values()) <= names
    assert {c for cands in AMBIGUOUS_DEVICE_NAMES.values() for c in cands} <= names
    # an alias never hides a catalog name, and no name is both an alias and ambiguous
    assert not (set(DEVICE_ALIASES) | set(AMBIGUOUS_DEVICE_NAMES)) & names
    assert not set(DEVICE_ALIASES) & set(AMBIGUOUS_DEVICE_NAMES)


@pytest.mark.parametrize(
    "given, entry",
    [
        ("l4", "l4"),
        ("L4", "l4"),
        ("h100", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("H100-SXM", "h100-sxm"),
        ("h100 sxm5", "h100-sxm"),
        ("H100_PCIe", "h100-pcie"),
        ("H200-SXM", "h200"),
        ("a100-sxm-80gb", "a100-80gb-sxm"),
        ("RTX4090", "rtx-4090"),
        ("  t4 ", "t4"),
        ("CPU", "cpu"),
    ],
)
def test_spellings_resolve_to_the_catalog(given, entry):
    assert resolve_device_name(given) == entry


@pytest.mark.parametrize(
    "reported, entry",
    [  # what nvidia-smi --query-gpu=name and torch.cuda.get_device_name() print for these parts
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA L40S", "l40s"),
        ("Tesla T4", "t4"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_driver_reported_names_resolve(reported, entry):
    assert resolve_device_name(reported) == entry


def test_aliases_load_the_catalog_entry():
    assert load_device("L4") == load_device("l4")
    assert load_device("h100").name == "h100-sxm"
    assert load_device("NVIDIA H100 80GB HBM3").memory_bandwidth_bytes_per_s == 3.35e12


@pytest.mark.parametrize("name", ["a100", "A100", "NVIDIA A100", "a100-80gb", "A100-SXM4", "h100 80gb"])
def test_ambiguous_names_are_refused_with_the_candidates(name):
    with pytest.raises(SpecsimError, match="is ambiguous") as err:
        load_device(name)
    key = "h100-80gb" if "h100" in name.lower() else None
    cands = AMBIGUOUS_DEVICE_NAMES[key] if key else ("a100-80gb-sxm",)
    assert all(c in str(err.value) for c in cands) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["tpu-v9", "H100 NVL", "NVIDIA A100-PCIE-40GB", "nvidia", "h100-sxm-pcie"])
def test_unknown_names_keep_their_error_listing_the_catalog(name):
    with pytest.raises(SpecsimError, match=f"unknown device {name!r}") as err:
        load_device(name)
    assert "(expected a path to a .json file or one of: " in str(err.value) and "h100-sxm" in str(err.value)


def test_an_existing_file_wins_over_an_alias(tmp_path, monkeypatch):
    mine = load_device("l4").to_json() | {"name": "my-l4", "display_name": "my L4"}
    (tmp_path / "L4").write_text(json.dumps(mine))
    monkeypatch.chdir(tmp_path)
    assert load_device("L4").name == "my-l4"


def test_two_spellings_of_one_device_are_given_twice():
    with pytest.raises(SpecsimError, match="device 'h100-sxm' given twice"):
        load_devices(["h100", "H100-SXM"])


def test_cli_hardware_takes_aliases(capsys):
    assert main(["hardware", "--list-devices", "--device", "L4", "--device", "h100", "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["l4", "h100-sxm"]
    argv = ["hardware", "--device", "L4", "--device", "H100-SXM", "--batch", "1", "--context", "1024"]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "l4" in out


def test_cli_ambiguous_and_unknown_are_one_line(capsys):
    assert main(["hardware", "--list-devices", "--device", "a100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ambiguous" in err and "a100-80gb-pcie" in err
    assert main(["hardware", "--list-devices", "--device", "tpu-v9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown device 'tpu-v9'" in err and "rtx-4090" in err


def test_cpu_device_json_is_what_it_writes(tmp_path, capsys, monkeypatch):
    """``calibrate cpu-device --json``: the text line's figures as one object (SI units), as written."""
    from specsim.hardware import cpu

    monkeypatch.setattr(cpu, "measure_bandwidth_bytes_per_s", lambda: 40e9)
    monkeypatch.setattr(cpu, "measure_flops_per_s", lambda: 200e9)
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "cpu-device", "--out", str(out), "--name", "box", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = load_device(str(out))
    assert printed["out"] == str(out) and printed["name"] == written.name == "box"
    assert printed["memory_bandwidth_bytes_per_s"] == written.memory_bandwidth_bytes_per_s == 40e9
    assert printed["peak_flops_per_s"] == written.peak_flops_per_s == 200e9
    assert printed["peak_flops_dtype"] == "fp32" and printed["memory_bytes"] == written.memory_bytes
    assert main(["calibrate", "cpu-device", "--out", str(out), "--name", "box"]) == 0
    assert (
        capsys.readouterr().out
        == f"wrote {out}: 40.0 GB/s, 200.0 GFLOP/s fp32, {written.memory_bytes / 1e9:.1f} GB\n"
    )


def test_list_devices_shows_the_price_given(capsys):
    """``--price`` is what the plan prices a device-hour at, so the device list shows it too."""
    assert main(["hardware", "--list-devices", "--device", "l4", "--price", "l4=0.55", "--json"]) == 0
    (l4,) = json.loads(capsys.readouterr().out)
    assert l4["price_per_hour_usd"] == {"value": 0.55, "source": "--price"}
    assert main(["hardware", "--list-devices", "--device", "l4", "--price", "h100=3"]) == 2
    assert "--price: device 'h100-sxm' is not among the devices (l4)" in capsys.readouterr().err
