"""The zoo tokenizer: byte-level BPE trained on the task corpus with the ``tokenizers`` library.

Special tokens (fixed ids): ``<pad>`` 0, ``<s>`` 1 (bos, prepended by the post-processor like Llama),
``</s>`` 2 (eos), ``<image>`` 3 (LLaVA image placeholder). Byte-level pre-tokenisation makes decoding an
exact round trip (text-only drafting's ``"\\n"`` is encodable too). Saved as ``tokenizer.json`` and
loaded with ``PreTrainedTokenizerFast``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<image>")
PAD_ID, BOS_ID, EOS_ID, IMAGE_ID = 0, 1, 2, 3
DEFAULT_VOCAB_SIZE = 1024  # an upper bound: BPE stops once every corpus word is one token (~670)


def train_tokenizer(texts: list[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> Any:
    """A ``tokenizers.Tokenizer`` (byte-level BPE, ``vocab_size`` ids incl. 256 bytes and 4 specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts + ["\n"], trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, f"special token {t} got id {tok.token_to_id(t)}"
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tok


def wrap(tok: Any) -> Any:
    """``PreTrainedTokenizerFast`` around a ``tokenizers.Tokenizer`` with the zoo's special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
        padding_side="left",
        model_max_length=2048,
    )


def save_tokenizer(tokenizer: Any, directory: str | Path) -> None:
    """Write ``tokenizer.json`` and its HF config files into ``directory``."""
    tokenizer.save_pretrained(str(directory))


def load_tokenizer(directory: str | Path) -> Any:
    """The zoo tokenizer from a directory (offline; ``PreTrainedTokenizerFast``)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory), local_files_only=True)
