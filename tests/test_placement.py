"""--device-map / --max-memory: a model split over CPU and disk by accelerate still runs, and says where."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from calibrate.measure.latency_assembly import measurement_provenance  # noqa: E402
from calibrate.models import loading as M  # noqa: E402
from calibrate.models.placement import parse_max_memory  # noqa: E402
from specsim.cli.main import main  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 120,
    "max_position_embeddings": 64,
}


def _param_bytes(loaded) -> int:
    return sum(p.numel() * p.element_size() for p in loaded.model.parameters())


def test_split_over_cpu_and_disk_runs_and_is_recorded(tmp_path):
    whole = M.build_random_model(TINY, seed=3, name="tiny")
    budget = {"cpu": _param_bytes(whole) // 3}  # cannot hold the model: accelerate offloads the rest to disk
    split = M.build_random_model(TINY, seed=3, name="tiny", device_map="auto", max_memory=budget)
    dmap = split.model.hf_device_map
    assert {"cpu", "disk"} <= set(dmap.values()) and split.device == "cpu"
    assert (
        "-> cpu" in split.placement and "-> disk" in split.placement and "max memory cpu=" in split.placement
    )
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.no_grad():
        assert torch.allclose(split.model(ids).logits, whole.model(ids).logits, atol=1e-5)
    notes = measurement_provenance({"target": split, "draft": whole}).notes
    assert "target placement: device map auto" in notes and "-> disk" in notes
    # real weights go through from_pretrained(device_map=...)
    whole.model.save_pretrained(tmp_path / "tiny")
    real = M.load_model(str(tmp_path / "tiny"), device_map="balanced", max_memory=budget)
    assert "disk" in real.model.hf_device_map.values() and real.placement.startswith("device map balanced")
    with torch.no_grad():
        assert torch.allclose(real.model(ids).logits, whole.model(ids).logits, atol=1e-5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("cuda:0=20GiB,cpu=64GiB", None),
        ("0=1.5GB", None),
        ("gpu0=20GiB", "expected a device cuda:N, N, cpu or disk, got 'gpu0'"),
        ("cpu=lots", "expected a size like 20GiB or 500MB for 'cpu', got 'lots'"),
        ("cpu", "expected DEVICE=SIZE entries"),
    ],
)
def test_max_memory_parsing(text, message):
    if message is None:
        out = parse_max_memory(text)
        assert out == ({0: 20 * 2**30, "cpu": 64 * 2**30} if text.startswith("cuda") else {0: int(1.5e9)})
    else:
        with pytest.raises(SpecsimError, match=message):
            parse_max_memory(text)


def test_cli_max_memory_needs_device_map(tmp_path, capsys):
    out = str(tmp_path / "p.json")
    rc = main(
        [
            "calibrate",
            "latency",
            "--target-config",
            "llava-1.5-7b",
            "--draft-config",
            "llava-1.5-68m",
            "--max-memory",
            "cpu=1GiB",
            "--out",
            out,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--max-memory: needs --device-map" in err and err.count("\n") == 1


def test_a_map_that_splits_nothing_names_the_one_device(tmp_path):
    """--device-map auto on a CPU host recorded 'device map auto: ' with nothing after it (real weights: no
    hf_device_map), or ' -> cpu' after an empty name (random weights: the map {'': 'cpu'})."""
    built = M.build_random_model(TINY, seed=3, name="tiny", device_map="auto")
    built.model.save_pretrained(tmp_path / "tiny")
    real = M.load_model(str(tmp_path / "tiny"), device_map="auto")
    for loaded in (built, real):
        assert loaded.placement == "device map auto: the whole model -> cpu"
