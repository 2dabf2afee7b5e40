"""A model ready to time (:class:`LoadedModel`, made by :mod:`calibrate.models.loading`), the conditions it
is loaded under (torch device and threads, one token→id map for a draft and its target, a quiet console with
``--no-progress``: :func:`quiet_loading`) and the random inputs of its real shapes that timing feeds it: text
ids clear of the image placeholders, KV caches of any context (no prefill needed) and pixel values. Latency
does not depend on the values.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.models.placeholders import forbid_placeholders, placeholder_ids
from specsim.dtypes import canonical_dtype
from specsim.errors import SpecsimError, SpecsimWarning, warn


class VocabMismatchError(SpecsimError):
    """Draft and target do not share one token→id map."""


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to time: ``kind`` is "causal" or "vlm", ``weights`` "real" or "random"."""

    model: Any
    tokenizer: Any | None
    name: str
    kind: str
    weights: str
    device: str
    dtype: str
    processor: Any | None = None  # image + text processor of a VLM loaded with real weights
    placement: str = ""  # module -> device summary when placed with a device map (calibrate.models.placement)

    def __post_init__(self):
        forbid_placeholders(self.model)  # a sampled image placeholder would break the next forward

    @property
    def text_config(self) -> Any:
        """The decoder (language-model) config: ``config.text_config`` for VLMs, the config otherwise."""
        return self.model.config.get_text_config(decoder=True)

    @property
    def vocab_size(self) -> int:
        """Rows of the output embedding (ids the model can emit)."""
        return int(self.text_config.vocab_size)


def torch_dtype(dtype: str):
    """The ``torch.dtype`` for a dtype name or alias."""
    import torch

    return getattr(torch, canonical_dtype(dtype))


def param_count(loaded: LoadedModel) -> int:
    """Number of parameters of the model."""
    return int(sum(p.numel() for p in loaded.model.parameters()))


# --------------------------------------------------------------------------- device, threads, vocabulary
def set_threads(threads: int | None) -> int:
    """Set torch's intra-op CPU threads (when given) and return the number in use."""
    import torch

    if threads is not None:
        if int(threads) < 1:
            raise SpecsimError(f"--threads: expected an integer >= 1, got {threads}")
        warn_oversubscribed(int(threads))
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def warn_oversubscribed(threads: int) -> None:
    """A warning when ``threads`` exceeds the CPUs this process may run on: the threads then take turns on
    them, and every timing is slower and noisier than the machine gives with as many threads as CPUs."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cpus = os.cpu_count()
    if cpus and threads > cpus:
        warn(
            f"--threads {threads}: more threads than the {cpus} CPUs this process may use; they take turns, "
            f"so the timings are slower and noisier than with --threads {cpus}"
        )


def check_device(device: str) -> str:
    """Validate a torch device string against this build and machine: 'cpu', 'cuda', 'cuda:N', 'mps'."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise SpecsimError(f"unknown device {device!r} (expected cpu, cuda, cuda:N or mps)") from None
    usable = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if mps_available() else [])
    if dev.type not in usable:
        why = (
            "is not a device specsim can time"
            if dev.type not in ("cuda", "mps")
            else "is not available in this torch build or on this machine"
        )
        raise SpecsimError(f"device {device!r} {why} (expected one of: {', '.join(usable)})")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise SpecsimError(
            f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
            f"(expected cuda:0..cuda:{torch.cuda.device_count() - 1})"
        )
    return str(dev)


def mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def check_same_vocab(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Raise :class:`VocabMismatchError` naming the first id whose token differs between the tokenizers."""
    target, draft = (
        {int(i): t for t, i in tok.get_vocab().items()} for tok in (target_tokenizer, draft_tokenizer)
    )
    for i in sorted(set(target) | set(draft)):
        t, d = target.get(i), draft.get(i)
        if t != d:
            raise VocabMismatchError(
                f"draft and target vocabularies differ at id {i}: target has token {t!r}, draft has {d!r} "
                f"(expected one shared token->id map; target has {len(target)} tokens, draft {len(draft)})"
            )


def check_pair_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Tokenizers when both have one, else the LM vocabulary sizes, must match."""
    if target.tokenizer is not None and draft.tokenizer is not None:
        check_same_vocab(target.tokenizer, draft.tokenizer)
    elif target.vocab_size != draft.vocab_size:
        raise VocabMismatchError(
            f"draft vocabulary has {draft.vocab_size} ids but target has {target.vocab_size} "
            f"(expected the same token->id map)"
        )


# --------------------------------------------------------------------------- quiet loading (--no-progress)
_LIBRARY_LOGGERS = ("transformers", "huggingface_hub", "accelerate")  # their WARNINGs a quiet load collects
_QUIET = contextvars.ContextVar("specsim_quiet_loading", default=False)  # nested quiet blocks join the outer
_GGUF_MODULE = "transformers.modeling_gguf_pytorch_utils"  # dequantises behind a plain tqdm.auto bar


@contextlib.contextmanager
def quiet_loading(progress: bool):
    """With ``progress`` off (``--no-progress``) a block that loads models prints no library progress bar
    and at most one ``specsim: warning:`` line for the libraries' warnings; with it on, nothing changes.

    transformers' and huggingface_hub's bars go off with their own switch; the GGUF conversion's raw tqdm,
    which ignores it, is swapped for a disabled one. WARNING records of :data:`_LIBRARY_LOGGERS` and Python
    warnings other than specsim's are collected: a block that ends normally reports them as one
    :class:`SpecsimWarning` (how many, the first one's first line); one that raises drops them, so its error
    stays one line. All is restored on exit.
    """
    if progress or _QUIET.get():
        yield
        return
    heard: list[tuple[str, str]] = []  # (library, message)
    caught: list = []
    token, failed = _QUIET.set(True), True
    try:
        with _no_bars(), _library_logs_into(heard), warnings.catch_warnings(record=True) as caught:
            yield
        failed = False
    finally:
        _QUIET.reset(token)
        for w in caught:
            if issubclass(w.category, SpecsimWarning):  # ours, shown as they came (a failed block's too)
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            else:
                heard.append((_package_of(w.filename), f"{w.category.__name__}: {w.message}"))
    if heard and not failed:
        first = re.sub(r"\x1b\[[0-9;]*m|[\x00-\x1f\x7f]", "", heard[0][1].strip().split("\n")[0])[:160]
        libs, n = " and ".join(sorted({lib for lib, _ in heard})), len(heard)
        warn(
            f"{libs} warned {n} time{'s' * (n > 1)} while loading the models (first: {first!r}); "
            "run without --no-progress to see them"
        )


def _package_of(filename: str) -> str:
    """The installed package a Python warning came from (``.../site-packages/torch/...``: torch)."""
    parts = Path(filename).parts
    dirs = [i for i, part in enumerate(parts[:-1]) if part in ("site-packages", "dist-packages")]
    return parts[dirs[-1] + 1] if dirs else "python"


@contextlib.contextmanager
def _no_bars():
    """transformers' and huggingface_hub's progress bars, and the GGUF conversion's, off inside the block."""
    import functools
    import importlib

    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    bars_on, hub_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # huggingface_hub's too
    try:
        gguf_utils = importlib.import_module(_GGUF_MODULE)
    except ImportError:  # another transformers layout: no GGUF bar to silence there
        gguf_utils = None
    raw = getattr(gguf_utils, "tqdm", None)
    if raw is not None:
        gguf_utils.tqdm = functools.partial(raw, disable=True)
    try:
        yield
    finally:
        if raw is not None:
            gguf_utils.tqdm = raw
        if bars_on:
            hf_logging.enable_progress_bar()
        hub.disable_progress_bars() if hub_off else hub.enable_progress_bars()


@contextlib.contextmanager
def _library_logs_into(heard: list):
    """WARNING (and worse) records of the library loggers appended to ``heard`` instead of printed."""
    import logging

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append((record.name.split(".")[0], record.getMessage()))

    collect = Collect(logging.WARNING)
    saved = [(log, log.handlers[:], log.propagate) for log in map(logging.getLogger, _LIBRARY_LOGGERS)]
    for log, _, _ in saved:
        log.handlers, log.propagate = [collect], False
    try:
        yield
    finally:
        for log, handlers, propagate in saved:
            log.handlers, log.propagate = handlers, propagate


# --------------------------------------------------------------------------- synthetic inputs for timing
def token_id_limit(loaded: LoadedModel) -> int:
    """Exclusive upper bound for random text ids: the vocabulary, minus special ids from the image token
    on."""
    ids = [i for i in placeholder_ids(loaded.model.config) if 0 < i < loaded.vocab_size]
    return min(ids, default=loaded.vocab_size)  # a stray image token would demand image features


def random_input_ids(loaded: LoadedModel, batch: int, tokens: int, generator) -> Any:
    """Random text ids [batch, tokens] on the model's device (latency does not depend on the values)."""
    import torch

    ids = torch.randint(0, token_id_limit(loaded), (batch, tokens), generator=generator)
    return ids.to(loaded.device)


def random_kv_cache(loaded: LoadedModel, batch: int, context_tokens: int, generator) -> Any:
    """A ``DynamicCache`` holding ``context_tokens`` positions of random keys/values per layer.

    Same shapes and dtype as the cache a real prefill leaves ([batch, kv_heads, context, head_dim]
    per layer), so a forward on top of it costs what it costs in the engine, without the prefill.
    """
    import torch
    from transformers import DynamicCache

    cfg = loaded.text_config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    shape = (batch, kv_heads, context_tokens, head_dim)
    dt = torch_dtype(loaded.dtype)
    layers = [
        (
            torch.randn(shape, generator=generator).to(loaded.device, dt),
            torch.randn(shape, generator=generator).to(loaded.device, dt),
        )
        for _ in range(int(cfg.num_hidden_layers))
    ]
    return DynamicCache(layers, config=loaded.model.config)


def image_token_count(config: Any) -> int:
    """Visual tokens one image occupies in a LLaVA-style prompt: (image_size / patch_size)², CLS dropped."""
    seq = getattr(config, "image_seq_length", None)
    vision = config.vision_config
    patches = (int(vision.image_size) // int(vision.patch_size)) ** 2
    if getattr(config, "vision_feature_select_strategy", "default") == "full":
        patches += 1
    return int(seq) if seq and int(seq) == patches else patches


def random_pixel_values(loaded: LoadedModel, images: int, generator) -> Any:
    """Random pixel values [images, channels, size, size] in the model's dtype and device."""
    import torch

    vision = loaded.model.config.vision_config
    shape = (images, int(getattr(vision, "num_channels", 3)), int(vision.image_size), int(vision.image_size))
    return torch.randn(shape, generator=generator).to(loaded.device, torch_dtype(loaded.dtype))
