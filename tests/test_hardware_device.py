"""Catalog files validate, cite a source per number; bad device files give one-line errors."""

import json

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware import cpu
from specsim.hardware.device import CATALOG_DIR, Device, catalog_names, load_device

REQUIRED = {
    "a100-40gb-sxm",
    "a100-80gb-sxm",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "l4",
    "l40s",
    "a10g",
    "rtx-4090",
    "mi300x",
    "cpu",
    "rtx-3090",
    "rtx-3060",
    "a100-80gb-pcie",
    "t4",
    "v100-sxm2-32gb",
    "h20",
    "b200",
    "mi250x",
}
# Datasheet figures (dense BF16/FP16): bandwidth TB/s, TFLOP/s, GB.
EXPECTED = {
    "a100-40gb-sxm": (1.555, 312, 40),
    "a100-80gb-sxm": (2.039, 312, 80),
    "h100-sxm": (3.35, 989, 80),
    "h100-pcie": (2.0, 756, 80),
    "h200": (4.8, 989, 141),
    "l4": (0.3, 121, 24),
    "l40s": (0.864, 362.05, 48),
    "a10g": (0.6, 125, 24),
    "rtx-4090": (1.008, 82.6, 24),
    "mi300x": (5.3, 1307.4, 192),
    "rtx-3090": (0.936, 71, 24),
    "rtx-3060": (0.36, 25.6, 12),
    "a100-80gb-pcie": (1.935, 312, 80),
    "t4": (0.32, 65, 16),
    "v100-sxm2-32gb": (0.9, 125, 32),
    "h20": (4.0, 148, 96),
    "b200": (8.0, 2250, 180),
    "mi250x": (3.2768, 383, 128),
}


def test_catalog_complete_and_valid():
    assert REQUIRED <= set(catalog_names())
    for name in catalog_names():
        if name == "cpu":
            continue
        dev = load_device(name)
        assert dev.name == name and dev.kind == "gpu"
        optional = {"interconnect_gpus", "scale_out_bandwidth_bytes_per_s", "price_per_hour_usd"}
        optional |= {"compute_capability"}  # NVIDIA's alone (tests/test_dtype_support.py)
        assert set(dev.sources) - optional == {
            "memory_bandwidth_bytes_per_s",
            "peak_flops_per_s",
            "memory_bytes",
            "interconnect_bandwidth_bytes_per_s",
            "int32_ops_per_s",
        }
        # the CUDA cores' integer rate is far below the tensor-core peak
        assert 1e12 < dev.int32_ops_per_s < dev.peak_flops_per_s
        assert all(
            any(
                w in s.lower()
                for w in (
                    "datasheet",
                    "data sheet",
                    "whitepaper",
                    "aws",
                    "specifications",
                    "reference architecture",
                    "developer.nvidia.com/cuda-gpus",  # NVIDIA's compute capability table
                )
            )
            for k, s in dev.sources.items()
            if k != "price_per_hour_usd"  # a price list, checked below
        )
        assert 1e9 < dev.interconnect_bytes_per_s <= dev.memory_bandwidth_bytes_per_s
        # a node or bridge joins a few GPUs; beyond them the per-GPU link is slower
        assert (dev.interconnect_gpus is None) == (dev.scale_out_bytes_per_s is None)
        if dev.interconnect_gpus is not None:
            assert (
                2 <= dev.interconnect_gpus <= 8 and dev.scale_out_bytes_per_s < dev.interconnect_bytes_per_s
            )
        # a price only where the catalog cites a dated public list; none invented
        assert dev.price_per_hour_usd is None or "20" in dev.sources["price_per_hour_usd"]
        assert Device.from_json(json.loads(json.dumps(dev.to_json()))) == dev
        bw, tf, gb = EXPECTED[name]
        assert dev.memory_bandwidth_bytes_per_s == pytest.approx(bw * 1e12)
        assert dev.peak_flops_per_s == pytest.approx(tf * 1e12)
        assert dev.memory_bytes == pytest.approx(gb * 1e9)


def test_cpu_measurement_is_plausible():
    bw = cpu.measure_bandwidth_bytes_per_s(n_bytes=16 * 2**20, repeats=2)
    flops = cpu.measure_flops_per_s(n=256, repeats=2)
    assert 1e8 < bw < 1e13 and 1e8 < flops < 1e14
    dev = load_device("cpu")
    assert (
        dev.kind == "cpu" and dev.peak_flops_dtype == "fp32" and "measured" in dev.sources["peak_flops_per_s"]
    )


def _good() -> dict:
    return json.loads((CATALOG_DIR / "l4.json").read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["memory_bandwidth_bytes_per_s"].pop("source"), "memory_bandwidth_bytes_per_s.source"),
        (
            lambda d: d["peak_flops_per_s"].update(value=-1),
            r"peak_flops_per_s.value: expected a finite number > 0",
        ),
        (lambda d: d.update(memory_bytes=24e9), r"memory_bytes: expected \{\"value\""),
        (lambda d: d.update(bandwidth=1), "unknown field 'bandwidth'"),
        (lambda d: d.update(schema_version=7), "schema_version: expected 1"),
        (lambda d: d.update(kind="tpu"), "kind: expected 'gpu' or 'cpu'"),
        (lambda d: d.update(price_per_hour_usd="cheap"), "price_per_hour_usd"),
    ],
)
def test_bad_device_files(tmp_path, mutate, message, capsys):
    d = _good()
    mutate(d)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecsimError, match=message):
        load_device(str(path))
    assert main(["hardware", "--device", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: device file mine.json") and err.count("\n") == 1
    assert "Traceback" not in err


def test_user_device_file_with_price(tmp_path):
    d = _good() | {"name": "my-l4", "price_per_hour_usd": 0.8}
    path = tmp_path / "my-l4.json"
    path.write_text(json.dumps(d))
    dev = load_device(str(path))
    assert dev.name == "my-l4" and dev.price_per_hour_usd == 0.8


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecsimError, match="unknown device 'tpu-v9'"):
        load_device("tpu-v9")
    with pytest.raises(SpecsimError, match="does not exist"):
        load_device(str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text('{"name": ')
    with pytest.raises(SpecsimError, match="not valid JSON"):
        load_device(str(tmp_path / "bad.json"))
