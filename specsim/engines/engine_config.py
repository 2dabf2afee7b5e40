"""Engine settings from a draft-length schedule ``[(first batch, last batch, K), ...]`` (a
:class:`~specsim.engines.recommend.Recommendation`'s, or a tuned serving γ policy's): vLLM
``speculative_config``, SGLang flags, TensorRT-LLM ``speculative_config``, llama.cpp server flags.

vLLM takes a K per batch-size range (``num_speculative_tokens_per_batch_size``), TensorRT-LLM a
``draft_len_schedule``; SGLang and llama.cpp take one K for every batch size. The draft is a model id
(a Hugging Face repo id or a local path), checked by :func:`check_model_id` before a config is written.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import os
import re

from specsim.engines.recommend import Recommendation
from specsim.errors import SpecsimError
from specsim.hardware.model_resolution import find_shipped
from specsim.jsonio import show

# vLLM speculative methods that bring no separate draft model (SpeculativeConfig.__post_init__).
VLLM_METHODS_WITHOUT_MODEL = ("ngram", "ngram_gpu", "suffix", "mtp")
VLLM_KEYS = ("method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size")
SGLANG_FLAGS = (
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)
SGLANG_ALGORITHMS_WITHOUT_MODEL = ("NGRAM",)
CONFIG_HEADINGS = {  # where each engine documents the settings ``specsim recommend`` prints under it
    "vllm": "vLLM --speculative-config (docs/features/speculative_decoding):",
    "sglang": "SGLang server flags (docs/advanced_features/speculative_decoding.md):",
    "llama.cpp": "llama-server flags (tools/server/README.md):",
}
_HF_REPO_ID = re.compile(r"([A-Za-z0-9][\w.-]*/)?[\w.-]+")
_PATH_PREFIXES = ("/", "./", "../", "~")


def is_model_id(text, *, bare_ok: bool = False) -> bool:
    """True for a Hugging Face repo id ``org/name`` (or ``name`` when ``bare_ok``) or a local path (see the
    module docstring)."""
    if not isinstance(text, str) or not text or not text.isprintable():
        return False
    if text.startswith(_PATH_PREFIXES) or os.path.isdir(text):
        return True
    return (
        len(text) <= 96
        and (bare_ok or "/" in text)
        and _HF_REPO_ID.fullmatch(text) is not None
        and "--" not in text
        and ".." not in text
        and not text.endswith((".", "-", ".git"))
    )


def hub_id(name: str) -> str | None:
    """The Hugging Face id (``org/name``) a shipped model is published under, for its id or an alias (an
    engine loads the id, not specsim's alias); None when nothing ships it."""
    found = find_shipped(name)
    return next((n for n in found[1].names if is_model_id(n)), None) if found else None


def check_model_id(value: str, flag: str, *, label: str = "", bare_ok: bool = False) -> str:
    """``value`` if it is a model id; else SpecsimError naming it, what was expected and ``flag``."""
    if is_model_id(value, bare_ok=bare_ok):
        return value
    raise SpecsimError(
        f"{flag}: {show(value)}{label} is not a model id: expected a Hugging Face id org/name or a local "
        f"path (/..., ./..., ~/...); give {flag} ID"
    )


def vllm_speculative_config(
    rec: Recommendation, *, method: str = "draft_model", draft_model: str | None = None
) -> dict | None:
    """The ``speculative_config`` dict (None when SD should be off at every batch size)."""
    return vllm_config_for_schedule(rec.schedule(), method=method, draft_model=draft_model)


def vllm_config_for_schedule(
    schedule, *, method: str = "draft_model", draft_model: str | None = None
) -> dict | None:
    """vLLM's ``speculative_config`` for ``schedule`` [(first batch, last batch, K), ...] covering 1..B (None:
    K = 0 at every batch size)."""
    k_max = max(g for _, _, g in schedule)
    if k_max == 0:
        return None
    if not method or not isinstance(method, str):
        raise SpecsimError(f"--engine-method: expected a vLLM speculative method name, got {method!r}")
    if method not in VLLM_METHODS_WITHOUT_MODEL and not draft_model:
        raise SpecsimError(f"--draft-model: vLLM method {method!r} needs the draft model (HF id or path)")
    config: dict = {"method": method}
    if draft_model:
        config["model"] = draft_model
    config["num_speculative_tokens"] = k_max
    if len(schedule) > 1:
        config["num_speculative_tokens_per_batch_size"] = [[lo, hi, g] for lo, hi, g in schedule]
    return config


def sglang_server_args(
    rec: Recommendation, *, at_batch: int, algorithm: str = "STANDALONE", draft_model: str | None = None
) -> list[str] | None:
    """``python -m sglang.launch_server`` flags for the best K at ``at_batch`` (None: SD off there)."""
    return sglang_args_for_gamma(rec.at(at_batch).gamma, algorithm=algorithm, draft_model=draft_model)


def sglang_args_for_gamma(
    gamma: int, *, algorithm: str = "STANDALONE", draft_model: str | None = None
) -> list[str] | None:
    """SGLang's speculative flags for one draft length ``gamma`` (None: 0, SD off)."""
    if gamma == 0:
        return None
    if not algorithm or not isinstance(algorithm, str):
        raise SpecsimError(f"--engine-method: expected an SGLang speculative algorithm, got {algorithm!r}")
    if algorithm.upper() not in SGLANG_ALGORITHMS_WITHOUT_MODEL and not draft_model:
        raise SpecsimError(
            f"--draft-model: SGLang algorithm {algorithm!r} needs --speculative-draft-model-path"
        )
    args = ["--speculative-algorithm", algorithm.upper()]
    if draft_model:
        args += ["--speculative-draft-model-path", draft_model]
    return args + [
        "--speculative-num-steps",
        str(gamma),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(gamma + 1),
    ]


def trtllm_speculative_config(
    schedule, *, draft_model: str | None, decoding_type: str = "Draft_Target"
) -> dict | None:
    """TensorRT-LLM's ``speculative_config`` for ``schedule`` [(first, last, K), ...] covering 1..B (None:
    K = 0 everywhere; no ``speculative_model`` for a decoding type without one, NGram or MTP); SpecsimError
    when its draft_len_schedule cannot hold it (K above batch 1's: module)."""
    ks = [g for _, _, g in schedule]
    if max(ks) == 0:
        return None
    if ks[0] != max(ks):
        raise SpecsimError(
            "TensorRT-LLM draft_len_schedule: its smallest batch key must carry max_draft_len, but K = "
            f"{ks[0]} at batch 1 is below K = {max(ks)} at a larger batch"
        )
    config = {"decoding_type": decoding_type, "max_draft_len": ks[0]}
    if draft_model:
        config["speculative_model"] = draft_model
    kept = list(schedule)
    while kept[-1][2] == 0:  # above the largest key TensorRT-LLM drafts nothing
        kept.pop()
    if len(kept) > 1 or len(kept) < len(schedule):
        config["draft_len_schedule"] = {int(hi): int(g) for _, hi, g in kept}
    return config


def llama_cpp_server_args(
    gamma: int, *, draft_model: str | None, parallel: int = 1, context_tokens: int | None = None, ngram=None
) -> list[str] | None:
    """``llama-server`` flags for one draft length ``gamma`` (always γ drafts: n-min and p-min 0) over
    ``parallel`` slots sharing ``context_tokens`` KV positions (``-c``; None: llama.cpp's default); with
    ``ngram`` (:class:`specsim.draft_shapes.ngram_lookup.NgramSimple`) that kind instead of a draft model.
    None: γ = 0, SD off."""
    if gamma == 0 and ngram is None:
        return None
    return [*_speculative_flags(gamma, draft_model, ngram), *llama_cpp_slot_flags(parallel, context_tokens)]


def llama_cpp_slot_flags(parallel: int, context_tokens: int | None) -> list[str]:
    """``-np`` slots and ``-c`` KV cells, shared as one pool (``-kvu``): with ``-np`` given, llama-server
    splits ``-c`` into equal per-slot parts unless ``--kv-unified`` (only ``-np`` left on auto turns it on;
    tools/server/server.cpp), and the pricing assumes one pool any request may fill."""
    ctx = ["-c", str(context_tokens)] if context_tokens is not None else []
    return ["-np", str(parallel), *ctx, *(["-kvu"] if parallel > 1 else [])]


def _speculative_flags(gamma: int, draft_model: str | None, ngram) -> list[str]:
    if ngram is not None:
        return list(ngram.server_flags())
    if not draft_model:
        raise SpecsimError("--draft-model: llama.cpp's draft-simple needs the draft GGUF (-md PATH)")
    return ["-md", draft_model, "--spec-type", "draft-simple", "--spec-draft-n-max", str(gamma),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]  # fmt: skip
