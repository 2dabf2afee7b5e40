"""Draft contexts of the multimodal drafting methods: what each ensemble member feeds the draft model,
and the captioners caption drafting uses.

A member's ``build(request, draft, shared, device) -> DraftContext`` returns input embeddings [L, H] of its
whole prompt (last token left pending) and its set-up ms. :class:`MultimodalContext` (M, Pn),
:class:`TargetFeaturesContext` (F), :class:`TextOnlyContext` (T, IbED App. C), :class:`ZeroRowsContext` (Z,
llama.cpp's draft on image input), :class:`CaptionContext` (C, IbED §5, App. E) with :class:`HFCaptioner`,
:class:`CachedCaptioner`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from calibrate.run.proposal import Request
from calibrate.run.timing import timed
from specsim.errors import SpecsimError

IMAGE_PLACEHOLDER = "<image>"
CAPTION_PROMPT = f"USER: {IMAGE_PLACEHOLDER} Write a one-line caption. ASSISTANT:"  # LLaVA-style, one image


@dataclass(frozen=True)
class DraftContext:
    """One member's prompt as draft input embeddings [L, H], its last token id and set-up ms by stage."""

    embeds: torch.Tensor
    last_id: int
    stages_ms: dict[str, float] = field(default_factory=dict)


def check_placeholders(text: str, images: int, prompt_id: str | None) -> None:
    """SpecsimError unless ``text`` holds one ``<image>`` placeholder per image (a processor expands each)."""
    if text.count(IMAGE_PLACEHOLDER) != images:
        raise SpecsimError(
            f"prompt {prompt_id!r}: {text.count(IMAGE_PLACEHOLDER)} {IMAGE_PLACEHOLDER} placeholders but "
            f"{images} images"
        )


def make_request(processor, text: str, images=(), *, prompt_id: str | None = None) -> Request:
    """A target :class:`Request` from a prompt with ``<image>`` placeholders and its images (PIL or arrays;
    a video is a list of frames). ``processor`` is an HF LLaVA-style processor (expands each placeholder
    to the model's image tokens); with no images a tokenizer works too."""
    images = list(images)
    check_placeholders(text, len(images), prompt_id)
    if not images:
        ids = processor(text=text, return_tensors="pt")["input_ids"]
        return Request(ids, text=text, prompt_id=prompt_id)
    enc = processor(text=text, images=images, return_tensors="pt")
    tok = getattr(processor, "tokenizer", processor)
    image_id = tok.convert_tokens_to_ids(IMAGE_PLACEHOLDER)
    return Request(
        enc["input_ids"],
        target_kwargs={"pixel_values": enc["pixel_values"]},
        text=text,
        images=tuple(images),
        prompt_id=prompt_id,
        image_token_id=int(image_id),
    )


def _embed(model, ids: list[int]) -> torch.Tensor:
    """Token embeddings [L, H] of the draft."""
    x = torch.tensor(ids, dtype=torch.long, device=model.device)
    return model.get_input_embeddings()(x)


def image_runs(request: Request) -> tuple[int, int]:
    """(image token id, image tokens per image) of the target's ``input_ids``."""
    n_images = len(request.images) or int(request.target_kwargs.get("pixel_values", torch.zeros(0)).shape[0])
    image_id = request.image_token_id
    if not n_images or image_id is None:
        return -1, 0
    total = int((request.input_ids == image_id).sum())
    if total % n_images:
        raise SpecsimError(
            f"request {request.prompt_id!r}: {total} image tokens do not split into {n_images} images"
        )
    return image_id, total // n_images


def replace_image_runs(ids: list[int], image_id: int, per_image: int, replacement) -> list[int]:
    """``ids`` with each image's ``per_image`` image tokens replaced by ``replacement(i)`` (a list of ids)."""
    out, i, k = [], 0, 0
    while i < len(ids):
        if ids[i] == image_id and per_image:
            out.extend(replacement(k))
            i += per_image
            k += 1
        else:
            out.append(ids[i])
            i += 1
    return out


def pool_features(features: torch.Tensor, tokens: int) -> torch.Tensor:
    """2-D average pooling of patch features [n_img, N, C] (N = s², row-major grid) to [n_img, tokens, C]."""
    n_img, n, c = features.shape
    side, out = math.isqrt(n), math.isqrt(tokens)
    if side * side != n:
        raise SpecsimError(f"pooling: {n} visual tokens per image are not a square grid")
    if tokens < 1 or out * out != tokens or tokens > n:
        raise SpecsimError(f"pooled(n): expected n a square number <= {n} (e.g. {n // 4}), got {tokens}")
    grid = features.transpose(1, 2).reshape(n_img, c, side, side)  # [n_img, C, s, s]
    pooled = torch.nn.functional.adaptive_avg_pool2d(grid, out)  # [n_img, C, √n, √n]
    return pooled.reshape(n_img, c, tokens).transpose(1, 2)


def splice_image_features(
    model, ids: list[int], image_id: int, per_image: int, feats: torch.Tensor
) -> tuple[list[int], torch.Tensor]:
    """Target ``ids`` with each image's run resized to the draft's ``n`` image tokens, and the draft's
    embeddings [L, H] with projected features ``feats`` [n_img, n, H] written at those tokens."""
    draft_image_id = int(getattr(model.config, "image_token_id", image_id))
    n = feats.shape[1]
    ids = replace_image_runs(ids, image_id, per_image, lambda k: [draft_image_id] * n)
    embeds = _embed(model, ids)
    embeds[torch.tensor(ids, device=embeds.device) == draft_image_id] = feats.reshape(-1, feats.shape[-1]).to(
        embeds.dtype
    )
    return ids, embeds


def vision_hidden(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """The draft VLM's selected vision features before the projector, [n_img, N, C] (LLaVA convention)."""
    cfg = model.config
    out = model.model.vision_tower(pixel_values.to(model.device, model.dtype), output_hidden_states=True)
    layers = (
        cfg.vision_feature_layer
        if isinstance(cfg.vision_feature_layer, (list, tuple))
        else [cfg.vision_feature_layer]
    )
    hs = [out.hidden_states[i] for i in layers]
    if getattr(cfg, "vision_feature_select_strategy", "default") == "default":
        hs = [h[:, 1:] for h in hs]  # drop CLS
    return torch.cat(hs, -1)


@dataclass
class MultimodalContext:
    """M (``pool_tokens`` None) or Pn: the draft VLM gets the images (optionally pooled to n tokens each)."""

    pool_tokens: int | None = None
    image_processor: object | None = None

    @property
    def code(self) -> str:
        return "M" if self.pool_tokens is None else f"P{self.pool_tokens}"

    def _pixels(self, request: Request, model) -> torch.Tensor:
        pv = request.target_kwargs.get("pixel_values")
        size = int(model.config.vision_config.image_size)
        if pv is not None and pv.shape[-1] == size and pv.shape[-2] == size:
            return pv  # same preprocessing as the target: reuse its pixel values
        if self.image_processor is None or not request.images:
            raise SpecsimError(
                f"multimodal drafting: the draft's vision tower needs {size}px images; "
                "pass image_processor= (and images in the request)"
            )
        return self.image_processor(list(request.images), return_tensors="pt")["pixel_values"]

    def build(self, request: Request, model, shared: dict, device) -> DraftContext:
        image_id, per_image = image_runs(request)
        stages = {}
        ids = request.input_ids[0].tolist()
        if per_image:
            if "vision_hidden" not in shared:
                with timed(device) as t:
                    shared["vision_hidden"] = vision_hidden(model, self._pixels(request, model))
                stages["draft_vision_ms"] = t.ms
            with timed(device) as t:
                hs = shared["vision_hidden"]
                if self.pool_tokens is not None:
                    hs = pool_features(hs, self.pool_tokens)
                feats = model.model.multi_modal_projector(hs)  # [n_img, n, H]
            stages["draft_vision_ms"] = stages.get("draft_vision_ms", 0.0) + t.ms
            ids, embeds = splice_image_features(model, ids, image_id, per_image, feats)
        else:
            embeds = _embed(model, ids)
        return DraftContext(embeds=embeds, last_id=ids[-1], stages_ms=stages)


@dataclass
class TargetFeaturesContext:
    """F (``target-features``, Gagrani et al. 2024's vision-feature reuse): the target's own selected vision
    features go through the draft's projector, so the draft runs no vision encoder. Needs the target's
    feature width to equal the draft projector's input width. In a server the target's prefill already
    holds these features; here they are recomputed once per request and timed as
    ``reused_target_vision_ms``, which is not charged to the draft."""

    target: object
    code: str = "F"

    def build(self, request: Request, model, shared: dict, device) -> DraftContext:
        image_id, per_image = image_runs(request)
        ids = request.input_ids[0].tolist()
        if not per_image:
            return DraftContext(embeds=_embed(model, ids), last_id=ids[-1])
        with timed(device) as t:
            hs = vision_hidden(self.target, request.target_kwargs["pixel_values"])
        width = model.model.multi_modal_projector.linear_1.in_features
        if hs.shape[-1] != width:
            raise SpecsimError(
                f"target-features drafting: the target's vision features are {hs.shape[-1]} wide "
                f"but the draft's projector takes {width} (expected equal widths)"
            )
        feats = model.model.multi_modal_projector(hs.to(model.device, model.dtype))
        ids, embeds = splice_image_features(model, ids, image_id, per_image, feats)
        return DraftContext(embeds=embeds, last_id=ids[-1], stages_ms={"reused_target_vision_ms": t.ms})


@dataclass
class TextOnlyContext:
    """T: each ``<image>`` becomes "\\n" in the prompt text (re-tokenised); without a tokenizer, each
    image's token run becomes ``newline_ids``."""

    tokenizer: object | None = None
    newline_ids: tuple[int, ...] | None = None
    code: str = "T"

    def build(self, request: Request, model, shared: dict, device) -> DraftContext:
        if self.tokenizer is not None and request.text:
            text = request.text.replace(IMAGE_PLACEHOLDER, "\n")
            ids = self.tokenizer(text, return_tensors="pt")["input_ids"][0].tolist()
        else:
            image_id, per_image = image_runs(request)
            if per_image and self.newline_ids is None:
                raise SpecsimError("text-only drafting: needs a tokenizer (or newline_ids) to replace images")
            ids = replace_image_runs(
                request.input_ids[0].tolist(), image_id, per_image, lambda k: list(self.newline_ids)
            )
        return DraftContext(embeds=_embed(model, ids), last_id=ids[-1])


@dataclass
class ZeroRowsContext:
    """Z: the target's prompt with a zero input row at each of its image tokens, as llama.cpp's draft-simple
    speculative decoding feeds a draft that cannot read the target's projected image embeddings
    (``common/speculative.cpp``: one zero row per image token, positions kept contiguous)."""

    code: str = "Z"

    def build(self, request: Request, model, shared: dict, device) -> DraftContext:
        ids = request.input_ids[0].tolist()
        image_id, per_image = image_runs(request)
        if not per_image:
            return DraftContext(embeds=_embed(model, ids), last_id=ids[-1])
        at = torch.tensor(ids, device=model.device) == image_id
        # The image id may lie outside the draft's vocabulary: embed a valid id there, then zero the rows.
        embeds = _embed(model, [0 if i == image_id else i for i in ids])
        embeds[at] = 0.0
        return DraftContext(embeds=embeds, last_id=ids[-1])


@dataclass
class CaptionContext:
    """C: each ``<image>`` becomes ``prefix + captioner(image)``; the captioner's ms is ``caption_ms``."""

    captioner: object
    tokenizer: object
    prefix: str = "Image: "
    code: str = "C"

    def build(self, request: Request, model, shared: dict, device) -> DraftContext:
        if request.text.count(IMAGE_PLACEHOLDER) != len(request.images):
            raise SpecsimError(
                f"caption drafting: request {request.prompt_id!r} needs its text with "
                f"{IMAGE_PLACEHOLDER} placeholders and one image each"
            )
        with timed(device) as t:
            captions = [str(self.captioner(img)).strip() for img in request.images]
        pieces = request.text.split(IMAGE_PLACEHOLDER)
        text = pieces[0] + "".join(self.prefix + c + rest for c, rest in zip(captions, pieces[1:]))
        ids = self.tokenizer(text, return_tensors="pt")["input_ids"][0].tolist()
        return DraftContext(embeds=_embed(model, ids), last_id=ids[-1], stages_ms={"caption_ms": t.ms})


class HFCaptioner:
    """An HF image-to-text model as a captioner: greedy ``generate`` on ``prompt`` (with one
    ``<image>`` for LLaVA-style models; "" for BLIP-style), new tokens decoded."""

    def __init__(self, model, processor, *, prompt: str = "", max_new_tokens: int = 20):
        self.model, self.processor = model, processor
        self.prompt, self.max_new_tokens = prompt, int(max_new_tokens)

    @torch.inference_mode()
    def __call__(self, image) -> str:
        enc = self.processor(text=self.prompt or None, images=[image], return_tensors="pt")
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False)
        new = out[0, enc["input_ids"].shape[1] :] if "input_ids" in enc else out[0]
        tok = getattr(self.processor, "tokenizer", self.processor)
        return tok.decode(new, skip_special_tokens=True)


@dataclass
class CachedCaptioner:
    """Captions each distinct image once (keyed by its pixels): methods that share C do not re-caption.

    Only acceptance uses the cache; caption time is measured by ``specsim calibrate latency``.
    """

    captioner: Any
    cache: dict = field(default_factory=dict)

    def __call__(self, image) -> str:
        key = (getattr(image, "size", None), image.tobytes() if hasattr(image, "tobytes") else id(image))
        if key not in self.cache:
            self.cache[key] = self.captioner(image)
        return self.cache[key]


def hf_captioner(loaded, prompt: str | None = None, max_new_tokens: int = 24) -> HFCaptioner:
    """An :class:`HFCaptioner` over a loaded captioner VLM
    (:class:`calibrate.models.loaded_model.LoadedModel`); ``prompt`` defaults to :data:`CAPTION_PROMPT`."""
    if loaded.processor is None:
        raise SpecsimError(
            f"captioner {loaded.name!r} has no processor (expected a VLM folder with "
            "preprocessor and tokenizer files)"
        )
    return HFCaptioner(
        loaded.model,
        loaded.processor,
        prompt=CAPTION_PROMPT if prompt is None else prompt,
        max_new_tokens=max_new_tokens,
    )
