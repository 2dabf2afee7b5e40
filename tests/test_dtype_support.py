"""Weight formats a GPU's engines do not run: bfloat16 below compute capability 8.0 is said (it runs as
float16, the same bytes), float8 below 7.5 is refused, float8 below 8.9 is said to run weight-only; devices
without a compute capability (AMD, the CPU) are not checked. Before, every format was priced on every device
without a word (a V100 'ran' FP8 weights)."""

from __future__ import annotations

import json

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware.device import Device, catalog_names, load_device
from specsim.hardware.dtype_support import dtype_notes
from specsim.hardware.model import spec_from_config
from specsim.presets import preset_config

PAIR = ["--target", "llava-1.5-7b", "--draft", "llava-1.5-68m", "--alpha", "0.7", "--batch", "1"]


def _models(dtype: str) -> dict:
    target = spec_from_config(preset_config("llava-1.5-7b"), "llava-1.5-7b").with_dtype(dtype)
    return {"target": target, "draft": None}


def test_every_nvidia_entry_states_its_compute_capability_and_round_trips():
    for name in catalog_names():
        dev = load_device(name)
        assert (dev.compute_capability is not None) == (dev.vendor == "NVIDIA"), name
        assert Device.from_json(dev.to_json()) == dev
    assert [
        load_device(n).compute_capability for n in ("v100-sxm2-32gb", "t4", "a10g", "l4", "h100-sxm")
    ] == [
        "7.0",
        "7.5",
        "8.6",
        "8.9",
        "9.0",
    ]


@pytest.mark.parametrize("bad", ["8", 8.0, "eight", "8.0.1", ""])
def test_a_malformed_compute_capability_is_named(bad):
    d = load_device("h100-sxm").to_json()
    d["compute_capability"]["value"] = bad
    with pytest.raises(
        SpecsimError, match=r"device.compute_capability.value: expected a version such as '8.0'"
    ):
        Device.from_json(d)


def test_bfloat16_and_float8_by_compute_capability():
    devs = [load_device(n) for n in ("t4", "a10g", "h100-sxm", "mi300x")]
    bf16 = dtype_notes(_models("bfloat16"), devs)
    assert len(bf16) == 1 and bf16[0].startswith("t4: compute capability 7.5 has no bfloat16")
    assert dtype_notes(_models("float16"), devs) == ()
    fp8 = dtype_notes(_models("fp8"), devs)
    assert [n.split(":")[0] for n in fp8] == ["t4", "a10g"] and all("weight-only (W8A16" in n for n in fp8)
    with pytest.raises(SpecsimError, match="v100-sxm2-32gb: compute capability 7.0 runs no FP8 kernel"):
        dtype_notes(_models("float8"), [load_device("v100-sxm2-32gb")])


def test_hardware_says_and_refuses_them(capsys):
    argv = ["hardware", *PAIR, "--device", "t4", "--device", "h100", "--context", "1024", "--json"]
    assert main([*argv, "--dtype", "bfloat16"]) == 0
    notes = json.loads(capsys.readouterr().out)["plan"]["assumptions"]
    said = [n for n in notes if "compute capability" in n]
    assert said == [
        "t4: compute capability 7.5 has no bfloat16 (vLLM refuses it below 8.0): the target and draft "
        "weights in bfloat16 run in float16 there (--dtype float16), priced alike (2 bytes per weight)"
    ]
    assert main(["hardware", *PAIR, "--device", "v100-sxm2-32gb", "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specsim: error: v100-sxm2-32gb: compute capability 7.0 runs no FP8 kernel")
