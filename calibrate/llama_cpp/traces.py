"""Greedy acceptance traces from llama.cpp's own logits: quantised weights can choose other tokens than a
float copy of the same model, so the traces that predict llama.cpp's τ come from llama.cpp.

Two servers, no SD: the target decodes each prompt greedily for N tokens (EOS ignored, as the check's runs);
the draft, given the prompt and the target's first t tokens (the server reuses the cached prefix, so each
request feeds one token), names its argmax. ``match[t]`` = 1 where that argmax is the target's token at t:
the draft's chain in llama.cpp's SD proposes exactly these tokens along an accepted prefix. Each trace keeps
the target's ``tokens`` and the prompt's ``prompt_ids`` (an n-gram lookup replays from them).
"""

from __future__ import annotations

from dataclasses import dataclass

from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.llama_cpp.server import LlamaServer, ServerConfig
from specsim.profile_format import Trace

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TracedPrompt:
    """A prompt of the workload: its id and text (sent as a user message in the model's chat template)."""

    prompt_id: str
    text: str
    schema_version: int = SCHEMA_VERSION


def trace_prompts(
    llama: LlamaCpp,
    target: str,
    draft: str,
    prompts: list[TracedPrompt],
    new_tokens: int,
    threads: int,
    progress=None,
) -> list[Trace]:
    """One greedy trace per prompt (module docstring); ``progress(i, n)`` after each prompt."""
    out = []
    with (
        LlamaServer(llama, ServerConfig(target, threads)) as tgt,
        LlamaServer(llama, ServerConfig(draft, threads)) as dft,
    ):
        for i, p in enumerate(prompts):
            ids = tgt.tokenize_chat(p.text)
            tokens = [int(t) for t in tgt.complete(ids, new_tokens)["tokens"]]
            guesses = [_argmax(dft, ids + tokens[:k]) for k in range(len(tokens))]
            out.append(
                Trace(
                    match=tuple(int(g == t) for g, t in zip(guesses, tokens)),
                    prompt_id=p.prompt_id,
                    tokens=tuple(tokens),
                    prompt_tokens=len(ids),
                    draft_prompt_tokens=len(ids),
                    prompt_ids=tuple(ids),
                )
            )
            if progress is not None:
                progress(i + 1, len(prompts))
    return out


def _argmax(server: LlamaServer, ids: list[int]) -> int:
    """The model's greedy next token after ``ids`` (the server's cached prefix reused)."""
    return int(server.complete(ids, 1, cache_prompt=True)["tokens"][0])
