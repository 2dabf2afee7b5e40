"""Zoo model configs (HF LLaVA: CLIP vision tower + projector + Llama decoder), FLOP counts, save/load.

Roles: ``target`` (a few million parameters), ``draft`` (same family, ≥ 10× fewer decoder FLOPs per token,
like LLaVA-1.5-7B vs its LLaMA-68M draft in IbED) and ``captioner`` (the draft architecture, trained
only to caption). All three share one vision-tower shape, so the draft and captioner start from the
trained target's tower (as IbED's drafts share CLIP ViT-L) and ``target-features`` reuse is possible.
Images are 64×64 px, patch 16 px: 4×4 = 16 image tokens per image (CLS dropped, strategy "default").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calibrate.run.seeding import seeded
from calibrate.zoo.scenes import IMAGE_SIZE_PX
from calibrate.zoo.tokenizer import BOS_ID, EOS_ID, IMAGE_ID, PAD_ID

ROLES: tuple[str, ...] = ("target", "draft", "captioner")
PATCH_PX = 16
IMAGE_TOKENS_PER_IMAGE = (IMAGE_SIZE_PX // PATCH_PX) ** 2
# Decoder and vision sizes per role; "tiny" is for tests (seconds on one core).
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "full": {
        "vision": dict(hidden_size=96, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4),
        "target": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6),
        "draft": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=2),
    },
    "tiny": {
        "vision": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2),
        "target": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4),
        "draft": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2),
    },
}


def zoo_config(role: str, vocab_size: int, size: str = "full") -> Any:
    """``LlavaConfig`` for ``role`` (target/draft/captioner) with ``vocab_size`` tokens."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    if role not in ROLES:
        raise ValueError(f"role: expected one of {ROLES}, got {role!r}")
    if size not in SIZES:
        raise ValueError(f"size: expected one of {sorted(SIZES)}, got {size!r}")
    dims = SIZES[size]["target" if role == "target" else "draft"]
    vision = CLIPVisionConfig(
        image_size=IMAGE_SIZE_PX,
        patch_size=PATCH_PX,
        num_channels=3,
        projection_dim=SIZES[size]["vision"]["hidden_size"],
        **SIZES[size]["vision"],
    )
    text = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        num_key_value_heads=dims["num_attention_heads"],
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        **dims,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=IMAGE_ID,
        image_seq_length=IMAGE_TOKENS_PER_IMAGE,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )


def decoder_flops_per_token(text_config: Any, context_tokens: int = 0) -> float:
    """Forward FLOPs of the decoder for one token: 2·(matmul params + lm head) + 4·L·h·context (attention).

    Kaplan et al. (2020) convention, counting a multiply-add as 2 FLOPs; embeddings and norms excluded.
    """
    h, i, n_layers = text_config.hidden_size, text_config.intermediate_size, text_config.num_hidden_layers
    head_dim = getattr(text_config, "head_dim", None) or h // text_config.num_attention_heads
    kv = text_config.num_key_value_heads * head_dim
    attn = h * text_config.num_attention_heads * head_dim * 2 + h * kv * 2  # q, o + k, v
    mlp = 3 * h * i  # gate, up, down
    return 2.0 * (n_layers * (attn + mlp) + h * text_config.vocab_size) + 4.0 * n_layers * h * context_tokens


def parameter_counts(model: Any) -> dict[str, int]:
    """Parameters per part: vision tower, projector, decoder (language model + lm head) and total."""
    inner = model.model
    count = lambda m: sum(p.numel() for p in m.parameters())
    out = {
        "vision_tower": count(inner.vision_tower),
        "projector": count(inner.multi_modal_projector),
        "decoder": count(inner.language_model) + count(model.lm_head),
    }
    out["total"] = sum(out.values())
    return out


def build_model(config: Any, seed: int = 0) -> Any:
    """A randomly initialised ``LlavaForConditionalGeneration`` (float32, train mode) from ``config``."""
    from transformers import LlavaForConditionalGeneration

    with seeded(seed):
        return LlavaForConditionalGeneration(config)


def make_processor(tokenizer: Any) -> Any:
    """``LlavaProcessor``: PIL CLIP image processor at 64 px + the zoo tokenizer (expands ``<image>`` ×16)."""
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    images = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE_PX}, crop_size={"height": IMAGE_SIZE_PX, "width": IMAGE_SIZE_PX}
    )
    return LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=PATCH_PX,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def save_zoo_model(model: Any, processor: Any, directory: str | Path) -> Path:
    """Write weights (safetensors), config, generation config, tokenizer and processor into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.bos_token_id = BOS_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = PAD_ID
    model.save_pretrained(str(out), safe_serialization=True)
    processor.save_pretrained(str(out))
    return out


def load_zoo_model(directory: str | Path) -> tuple[Any, Any]:
    """(model in eval mode, processor) from a zoo directory, offline."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(str(directory), local_files_only=True)
    processor = AutoProcessor.from_pretrained(str(directory), local_files_only=True)
    return model.eval(), processor
