"""``--no-progress`` is quiet: no library progress bars (transformers' weight loading, its GGUF conversion,
huggingface_hub) and the libraries' warnings while loading folded into at most one ``specsim: warning:`` line
(none when the command fails: its one-line error says it all). Tiny models only, no downloads."""

import json
import re
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from calibrate.models import loading as M  # noqa: E402
from calibrate.models import reference_pair as R  # noqa: E402
from specsim.cli.main import main  # noqa: E402
from specsim.errors import SpecsimWarning  # noqa: E402
from specsim.profiles import save_profile  # noqa: E402
from tests.conftest import make_profile  # noqa: E402
from tests.test_models import TINY_LLAMA  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "library_logs_to_stderr")
BAR_MARKS = ("it/s", "s/it", "%|", "Loading weights", "Converting and de-quantizing")


def _folder(tmp_path, name: str, cfg: dict, *, drop: str | None = None) -> str:
    """A saved tiny model folder; ``drop`` removes one weight so that transformers warns (LOAD REPORT)."""
    import safetensors.torch as st

    folder = tmp_path / name
    M.build_random_model(cfg).model.save_pretrained(folder)
    if drop:
        weights = st.load_file(folder / "model.safetensors")
        del weights[drop]
        st.save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return str(folder)


def _gguf(path) -> str:
    """A 15 kB llama GGUF file (float32 tensors, a 32-token SentencePiece-style vocabulary)."""
    import numpy as np

    vocab, hidden, ffn, heads = 32, 16, 32, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // heads)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([1] * vocab)
    rng = np.random.default_rng(0)
    kv = hidden // heads
    shapes = {"token_embd": (vocab, hidden), "output_norm": (hidden,), "output": (vocab, hidden)}
    shapes |= {"blk.0.attn_norm": (hidden,), "blk.0.ffn_norm": (hidden,), "blk.0.attn_q": (hidden, hidden)}
    shapes |= {
        "blk.0.attn_k": (kv, hidden),
        "blk.0.attn_v": (kv, hidden),
        "blk.0.attn_output": (hidden, hidden),
    }
    shapes |= {
        "blk.0.ffn_gate": (ffn, hidden),
        "blk.0.ffn_up": (ffn, hidden),
        "blk.0.ffn_down": (hidden, ffn),
    }
    for name, shape in shapes.items():
        w.add_tensor(f"{name}.weight", rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _bars(err: str) -> list[str]:
    return [mark for mark in BAR_MARKS if mark in err]


def _foreign_lines(err: str) -> list[str]:
    """stderr lines that are not specsim's own one-line messages."""
    return [line for line in err.splitlines() if line.strip() and not line.startswith("specsim: ")]


@pytest.fixture
def library_logs_to_stderr():
    """transformers' log handler keeps the stderr of its import (under pytest, the session's capture): point
    it at file descriptor 2, where a terminal would see it and ``capfd`` reads it. Only transformers' own
    plain StreamHandler: pytest (9.2 on) also attaches its capture handlers, StreamHandler subclasses over a
    StringIO, to non-propagating loggers such as transformers', and they must keep their stream."""
    import logging
    import sys

    handlers = [h for h in logging.getLogger("transformers").handlers if type(h) is logging.StreamHandler]
    assert handlers, "transformers' own log handler was not found"
    before = [h.setStream(sys.__stderr__) for h in handlers]
    yield
    for handler, stream in zip(handlers, before):
        handler.setStream(stream)


@pytest.fixture
def bad_folder(tmp_path):
    return _folder(tmp_path, "bad", TINY_LLAMA, drop="model.layers.1.mlp.up_proj.weight")


def test_progress_on_shows_the_bars_the_quiet_run_hides(bad_folder, capfd):
    """The check below is not vacuous: with progress on, these loads do print bars and the load report."""
    M.load_pair(bad_folder, bad_folder, progress=True)
    err = capfd.readouterr().err
    assert "Loading weights" in err and "it/s" in err and "LOAD REPORT" in err


def test_folder_pair_loads_quietly_with_one_warning(bad_folder, capfd):
    capfd.readouterr()
    with pytest.warns(SpecsimWarning, match="transformers warned 2 times while loading") as caught:
        M.load_pair(bad_folder, bad_folder, progress=False)
    err = capfd.readouterr().err
    assert not _bars(err) and "LOAD REPORT" not in err and "[transformers]" not in err, err
    assert len(caught) == 1 and "\n" not in str(caught[0].message) and "\x1b" not in str(caught[0].message)
    # what was switched off comes back on
    assert transformers.utils.logging.is_progress_bar_enabled()
    M.load_pair(bad_folder, bad_folder, progress=True)
    assert "Loading weights" in capfd.readouterr().err


def test_gguf_conversion_bar_is_silenced(tmp_path, capfd, monkeypatch):
    """The reference pair path: GGUF files dequantised by transformers (its own raw tqdm bar)."""
    path = _gguf(tmp_path / "tiny.gguf")
    monkeypatch.setattr(R, "fetch_reference_pair", lambda cache_dir, progress: (path, path))
    capfd.readouterr()
    target, draft = M.load_pair("qwen2.5-coder-0.5b-1.5b", progress=False)
    err = capfd.readouterr().err
    assert target.vocab_size == draft.vocab_size == 32
    assert not _bars(err) and not _foreign_lines(err), err
    M.load_model(path)
    assert "Converting and de-quantizing" in capfd.readouterr().err  # restored afterwards


def _cli(*argv) -> list[str]:
    return [*argv, "--max-new-tokens", "4", "--threads", "1", "--no-progress"]


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "x", "prompt": "def add(a, b):"}) + "\n")
    return str(path)


def test_acceptance_and_check_print_no_bars_and_one_warning_line(tmp_path, bad_folder, prompts, capfd):
    out = str(tmp_path / "prof.json")
    pair = replace(make_profile().provenance, target=bad_folder, draft=bad_folder)  # the models the runs load
    save_profile(make_profile(acceptance=(), provenance=pair), out)  # its latency prices the check
    capfd.readouterr()
    models = ["--target", bad_folder, "--draft", bad_folder, "--prompts", prompts]
    assert main(_cli("calibrate", "acceptance", *models, "--out", out)) == 0
    err = capfd.readouterr().err
    assert not _bars(err) and not _foreign_lines(err), err
    assert [line for line in err.splitlines() if line.startswith("specsim: warning:")] == err.splitlines()
    assert len(err.splitlines()) == 1 and "without --no-progress" in err
    check = [
        "check",
        "--profile",
        out,
        "--gamma",
        "2",
        "--min-rounds",
        "1",
        "--max-rounds",
        "1",
        "--no-write",
    ]
    assert main(_cli(*check, *models)) == 0
    err = capfd.readouterr().err
    own = [
        ln for ln in _foreign_lines(err) if re.match(r"warning: the profile's latency|\d+ round\(s\) in", ln)
    ]
    assert not _bars(err) and _foreign_lines(err) == own, err  # check's own notes, no library output
    assert sum(ln.startswith("specsim: warning: transformers warned") for ln in err.splitlines()) == 1, err


def test_failed_load_is_one_error_line_without_library_warnings(tmp_path, bad_folder, prompts, capfd):
    other = _folder(tmp_path, "other", {**TINY_LLAMA, "vocab_size": 100})
    capfd.readouterr()  # saving the folder draws transformers' "Writing model shards" bar
    argv = ["--target", bad_folder, "--draft", other, "--prompts", prompts, "--out", str(tmp_path / "o.json")]
    assert main(_cli("calibrate", "acceptance", *argv)) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specsim: error: draft vocabulary has 100 ids"), err


def test_acceptance_json_summary(tmp_path, prompts, capfd):
    """``calibrate acceptance --json``: one JSON object on stdout instead of the text summary."""
    from specsim.profiles import load_profile

    folder = _folder(tmp_path, "tiny", TINY_LLAMA)
    out = str(tmp_path / "acc.json")
    capfd.readouterr()
    models = ["--target", folder, "--draft", folder, "--prompts", prompts]
    assert main(_cli("calibrate", "acceptance", *models, "--json", "--out", out)) == 0
    captured = capfd.readouterr()
    summary = json.loads(captured.out)  # nothing but the object
    assert captured.err == ""
    entry = load_profile(out).acceptance[0]
    assert summary["out"] == out and summary["methods"] == ["plain"] and summary["scenarios"] == ["p"]
    assert summary["prompts"] == 1 and summary["max_new_tokens"] == 4
    assert summary["seconds"] >= summary["load_seconds"] >= 0
    (row,) = summary["entries"]
    assert (row["method"], row["scenario"], row["prompts"], row["positions"]) == ("plain", "p", 1, 4)
    assert row["tau"] == entry.tau and row["gamma"] == entry.gamma == 5 and 0 <= row["match_rate"] <= 1
