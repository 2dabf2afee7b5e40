"""The workload of a calibration run: models, prompts and encoded requests, methods and captioner.

:func:`read_workload`, :func:`check_model_flags` and :func:`load_setup` turn the shared model/prompt flags
(:mod:`calibrate.cli.shared_options`) into a :class:`Setup` for ``calibrate acceptance`` and ``check``;
:func:`prompt_lengths` gives a prompt set's token lengths (to size latency grids)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

from calibrate.drafting import IMAGE_PLACEHOLDER
from calibrate.models import loading as M
from calibrate.models.loaded_model import LoadedModel, image_token_count
from calibrate.workload.prompt_sets import byte_ids, check_image_counts, encode, load_prompts, open_images
from specsim.errors import SpecsimError
from specsim.profile_format import Provenance


def scenario_name(base: str, images_per_prompt: int) -> str:
    """A scenario group's name: ``base`` plus '-<n>img' for a group of n-image prompts."""
    return base if images_per_prompt == 0 else f"{base}-{images_per_prompt}img"


@dataclass
class Setup:
    """Loaded target and draft, prompts and their requests, EOS id, prompt-set name, methods, captioner."""

    target: object
    draft: object
    prompts: list
    requests: list
    eos: object
    name: str
    methods: list
    captioner: object = None
    caption_prefix: str = "Image: "

    @property
    def groups(self) -> dict[int, list]:
        """Requests by images per prompt (scenario groups), in prompt order."""
        out: dict[int, list] = {}
        for p, r in zip(self.prompts, self.requests):
            out.setdefault(len(p.images), []).append(r)
        return dict(sorted(out.items()))

    def scenario(self, images_per_prompt: int, name: str | None) -> str:
        """Scenario name of a group: ``name`` (default: the prompt set's), as :func:`scenario_name`."""
        return scenario_name(name or self.name, images_per_prompt)

    def drafter(self, method: str):
        from calibrate.drafting import Method

        return Method.parse(method).make_drafter(
            self.target,
            self.draft,
            captioner=self.captioner,
            caption_prefix=self.caption_prefix,
            device=self.target.device,
        )


def _methods(args, given: list[str] | None, has_images: bool) -> list[str]:
    """The canonical method codes; SpecsimError for plain on images, or a caption flag with no caption method
    (it went unread)."""
    from calibrate.drafting import PLAIN, Method

    methods = list(dict.fromkeys(Method.parse(m).code for m in (given or [PLAIN])))
    if has_images and PLAIN in methods:
        raise SpecsimError(
            "--method: the prompts have images; expected multimodal methods such as --method M "
            "--method T --method C (plain is for text-only pairs)"
        )
    if not any(Method.parse(m).needs_captioner for m in methods):
        for option in ("captioner", "caption_prefix"):
            if getattr(args, option, None) is not None:
                raise SpecsimError(
                    f"--{option.replace('_', '-')}: applies to caption drafting only (a method with C, such "
                    f"as --method C or MTC), got methods {', '.join(methods)}"
                )
    return methods


@dataclass(frozen=True)
class Workload:
    """What a run will serve, read off the shared flags without loading a model: the prompt set's name, its
    prompts, the canonical method codes and the --preset pair's entry ({} without one)."""

    name: str
    prompts: list
    methods: list[str]
    preset: dict


def read_workload(args, methods: list[str] | None = None) -> Workload:
    """The :class:`Workload` of the shared flags (``methods``, else ``--method``), read before any model loads
    (so a check can refuse a bad flag before minutes of loading)."""
    from specsim.presets import pair

    preset = pair(args.preset) if args.preset else {}
    prompt_set = args.prompts or preset.get("prompts", "reference")
    prompts = load_prompts(
        prompt_set, limit=args.limit, allow_outside_images=getattr(args, "allow_outside_images", False)
    )
    check_image_counts(prompts)
    with_images = next((p for p in prompts if p.images), None)
    spec, draft = args.preset or (args.target if args.draft else None), None if args.preset else args.draft
    if with_images is not None and spec and M.target_builds_random(spec, draft, args.random_weights):
        how = f"{spec!r} with --random-weights" if args.random_weights else repr(spec)
        raise SpecsimError(
            f"prompts: the target ({how}) is built from its config with random weights and has no image "
            f"processor; expected prompts without images (e.g. --prompts reference), got images in "
            f"{with_images.id!r}"
        )
    methods = _methods(args, methods or args.method, with_images is not None)
    name = Path(prompt_set).stem if prompt_set.endswith(".jsonl") else prompt_set
    return Workload(name, prompts, methods, preset)


def check_model_flags(args) -> None:
    """SpecsimError for a flag loading would refuse: --max-new-tokens, the models, --device, --dtype."""
    if args.max_new_tokens < 1:
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 1, got {args.max_new_tokens}")
    if not args.preset and not (args.target and args.draft):
        raise SpecsimError("models: expected --preset PAIR or both --target and --draft")
    if args.preset and (args.target or args.draft):  # the preset names both models: these went unread
        raise SpecsimError("models: give either --preset PAIR or --target and --draft, not both")
    for option in ("target", "draft", "captioner"):
        M.check_local_spec(getattr(args, option, None), f"--{option}")
    M.check_device(args.device)
    M.canonical_dtype(args.dtype)


def setup_labels(args) -> tuple[str, str]:
    """(target, draft) names :func:`load_setup` gives its models, read off the flags before they load."""
    return M.pair_labels(args.preset or args.target, None if args.preset else args.draft, args.random_weights)


def load_setup(args, workload: Workload, cache_captions: bool = True) -> Setup:
    """Models, encoded requests and captioner for ``workload`` (:func:`read_workload`) after
    :func:`check_model_flags`; ``cache_captions``: one caption per image (acceptance's)."""
    from calibrate.drafting import CachedCaptioner, Method, hf_captioner, make_request
    from calibrate.run.engine import Request

    name, prompts, methods = workload.name, workload.prompts, workload.methods
    caption_spec = args.captioner or workload.preset.get("captioner")
    if any(Method.parse(m).needs_captioner for m in methods) and not caption_spec:  # before loading
        raise SpecsimError("--method C: caption drafting needs --captioner (an image-to-text VLM)")
    target, draft = M.load_pair(
        args.preset or args.target,
        None if args.preset else args.draft,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        random_weights=args.random_weights,
        progress=not args.no_progress,
    )
    tok = target.tokenizer
    reqs = []
    for p in prompts:
        if p.images:
            if target.processor is None:
                raise SpecsimError(
                    f"prompt {p.id!r} has images but target {target.name!r} has no image processor "
                    "(expected a VLM folder with processor files)"
                )
            request = make_request(target.processor, p.text, open_images(p), prompt_id=p.id)
            reqs.append(_placed(request, target))
            continue
        ids = encode(tok, p) if tok is not None else byte_ids(p.text, target.vocab_size)
        reqs.append(Request(ids.to(target.device), text=p.text, prompt_id=p.id))
    for model in (target, draft):
        _check_positions(model, prompts, reqs, args.max_new_tokens)
    eos = getattr(getattr(target.model, "generation_config", None), "eos_token_id", None)
    if eos is None and tok is not None:
        eos = tok.eos_token_id
    captioner = None
    if any(Method.parse(m).needs_captioner for m in methods):
        captioner = hf_captioner(
            M.model_from_spec(
                caption_spec,
                device=args.device,
                dtype=args.dtype,
                threads=args.threads,
                random_weights=False,
                seed=2,
                progress=not args.no_progress,
            )
        )
        # Acceptance captions each image once for every method; a check times every request's own captions.
        captioner = CachedCaptioner(captioner) if cache_captions else captioner
    prefix = Setup.caption_prefix if args.caption_prefix is None else args.caption_prefix
    return Setup(target, draft, prompts, reqs, eos, name, methods, captioner, prefix)


def _placed(request, target: LoadedModel):
    """``request`` with its tensors where the target runs (pixel values in its dtype)."""
    import torch

    dtype = target.model.dtype
    kwargs = {
        k: v.to(target.device, dtype if torch.is_floating_point(v) else v.dtype)
        for k, v in request.target_kwargs.items()
    }
    return replace(request, input_ids=request.input_ids.to(target.device), target_kwargs=kwargs)


def _check_positions(model, prompts, requests, max_new_tokens: int) -> None:
    """SpecsimError when prompt + new tokens exceed a model's maximum positions (max_position_embeddings)."""
    limit = getattr(model.text_config, "max_position_embeddings", None)
    if not isinstance(limit, int):
        return
    for p, r in zip(prompts, requests):
        need = r.input_ids.shape[1] + max_new_tokens
        if need > limit:
            raise SpecsimError(
                f"prompt {p.id!r}: {r.input_ids.shape[1]} prompt tokens + --max-new-tokens "
                f"{max_new_tokens} = {need} positions, but {model.name!r} has at most {limit} "
                "(max_position_embeddings)"
            )


def progress(items, enabled: bool, desc: str, unit: str = "prompt"):
    """``items`` behind a tqdm bar on stderr when ``enabled``, else ``items`` unchanged."""
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=unit, file=sys.stderr)


def provenance(setup: Setup, args) -> Provenance:
    """Provenance of a profile measured on ``setup`` (software versions, threads, prompt set)."""
    import torch
    import transformers

    return Provenance(
        target=setup.target.name,
        draft=setup.draft.name,
        device=str(args.device),
        dtype=setup.target.dtype,
        date=date.today().isoformat(),
        source="measured",
        software={"torch": torch.__version__, "transformers": transformers.__version__},
        weights=setup.target.weights,
        threads=torch.get_num_threads(),
        notes=f"acceptance: prompts={setup.name}, max_new_tokens={args.max_new_tokens}"
        + (f", caption prefix {setup.caption_prefix!r}" if setup.captioner else ""),
    )


def prompt_lengths(
    prompt_set: str, target: LoadedModel, *, allow_outside_images: bool = False
) -> tuple[list[int], list[int]]:
    """(target prompt tokens, shortest draft prompt tokens) per prompt of ``prompt_set``.

    The target sees each image as its run of visual tokens; the shortest draft context drops the images
    (text-only drafting). Without a tokenizer (random weights) a prompt costs one token per UTF-8 byte,
    as ``calibrate`` encodes it then.
    """
    tok = target.tokenizer or getattr(target.processor, "tokenizer", None)
    per_image = image_token_count(target.model.config) if target.kind == "vlm" else 0
    targets, drafts = [], []
    prompts = load_prompts(prompt_set, allow_outside_images=allow_outside_images)
    check_image_counts(prompts)
    for p in prompts:
        text = p.text.replace(IMAGE_PLACEHOLDER, "\n")
        n = encode(tok, replace(p, text=text)).shape[1] if tok is not None else len(text.encode("utf-8"))
        images = p.text.count(IMAGE_PLACEHOLDER)
        targets.append(int(n + images * per_image))
        drafts.append(int(n))
    return targets, drafts


# --------------------------------------------------------------------------- latency
def latency_specs(args) -> tuple[str | None, str | None, str | None, bool, bool]:
    """(pair loaded whole or None, target spec, draft spec, target random, draft random) of the flags."""
    target_spec = args.target_config or args.target
    draft_spec = args.draft_config or args.draft
    rand_t, rand_d = bool(args.target_config), bool(args.draft_config)
    if args.preset:
        entry = M.pair(args.preset)
        if target_spec is None and draft_spec is None:
            return args.preset, None, None, args.random_weights, args.random_weights
        target_spec = target_spec or entry["target"]
        draft_spec = draft_spec or entry["draft"]
    if target_spec is None or draft_spec is None:
        missing = "--target/--target-config" if target_spec is None else "--draft/--draft-config"
        raise SpecsimError(f"no model given for {missing} (expected it, or --preset PAIR)")
    return None, target_spec, draft_spec, rand_t, rand_d


def latency_labels(args) -> tuple[str, str]:
    """(target, draft) names :func:`latency_models` will give, before anything loads."""
    preset, target, draft, rand_t, rand_d = latency_specs(args)
    if preset is not None:
        return M.pair_labels(preset, None, rand_t)
    return M.model_label(target, rand_t), M.model_label(draft, rand_d)


def latency_models(args) -> dict:
    """Target, draft and (when asked or the preset has one) captioner of calibrate latency's flags."""
    place = _placement(args)
    preset, target_spec, draft_spec, rand_t, rand_d = latency_specs(args)
    kw = {"device": args.device, "dtype": args.dtype, "threads": args.threads, "progress": not args.quiet}
    if preset is not None:
        target, draft = M.load_pair(
            preset, random_weights=rand_t, cache_dir=args.cache_dir, seed=args.seed, **kw, **place
        )
        return _with_captioner(args, {"target": target, "draft": draft})
    M.set_threads(args.threads)
    target = M.model_from_spec(target_spec, random_weights=rand_t, seed=args.seed, **kw, **place)
    draft = M.model_from_spec(draft_spec, random_weights=rand_d, seed=args.seed + 1, **kw)
    M.check_pair_vocab(target, draft)
    return _with_captioner(args, {"target": target, "draft": draft})


def _placement(args) -> dict:
    """--device-map / --max-memory for the target's loader."""
    from calibrate.models.placement import parse_max_memory

    if args.max_memory and not args.device_map:
        raise SpecsimError("--max-memory: needs --device-map auto|balanced")
    return {"device_map": args.device_map, "max_memory": parse_max_memory(args.max_memory)}


def _with_captioner(args, models: dict) -> dict:
    """Adds ``--captioner``, or the preset pair's own captioner (the zoo has one)."""
    from specsim.presets import pair

    spec = args.captioner or (pair(args.preset).get("captioner") if args.preset else None)
    if spec:
        models["captioner"] = M.model_from_spec(
            spec,
            device=args.device,
            dtype=args.dtype,
            threads=args.threads,
            random_weights=bool(args.random_weights and not args.captioner),
            seed=args.seed + 2,
            progress=not args.quiet,
        )
    return models


SIZED_CONTEXTS = " (without --contexts, they reach the longest prompt plus --max-new-tokens)"


def check_plan_positions(models: dict, plan, contexts_given: bool = False) -> None:
    """SpecsimError when a planned forward reaches past a model's maximum positions (its config's
    ``max_position_embeddings``): every γ block runs at every context (context + γ + 1 positions), and
    prefill over the prompt tokens. ``contexts_given``: the contexts came from --contexts."""
    from specsim.draft_shapes.trees import parse_tree

    longest = {
        "--contexts/--verify-context/--gammas": max(plan.contexts_tokens) + max(plan.gammas) + 1,
        "--prefill-tokens": max(plan.prefill_tokens),
    }
    if plan.trees:
        longest["--tree-sizes/--tree"] = (
            max(plan.contexts_tokens) + max(parse_tree(t).n for t in plan.trees) + 1
        )
    for role in ("target", "draft"):
        limit = getattr(models[role].text_config, "max_position_embeddings", None)
        if not isinstance(limit, int):
            continue
        for option, positions in longest.items():
            if positions > limit:
                sized = SIZED_CONTEXTS if "gammas" in option and not contexts_given else ""
                raise SpecsimError(
                    f"{option}: the {role} {models[role].name!r} has at most {limit} positions "
                    f"(max_position_embeddings), but this plan needs {positions}{sized}"
                )
