"""llama.cpp's benchmark output read into passes: ``llama-bench -o jsonl`` and ``llama-batched-bench
--output-format jsonl`` (pure parsing; ``tests/data/llama_cpp/`` holds recordings).

A ``llama-bench`` line is one test: ``n_prompt`` rows in one forward (logits at the last row only) or
``n_gen`` single-row forwards one after another, on a cache ``n_depth`` positions deep (restored, not
timed), ``samples_ns`` one per repetition. A ``llama-batched-bench`` line is ``pl`` sequences of ``pp``
prompt tokens, then ``tg`` steps of one row per sequence (every row with logits), in one unified KV cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from specsim.errors import SpecsimError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BenchRecord:
    """One ``llama-bench`` test: the model, rows per forward (``n_prompt``; 1 for a generation test),
    forwards per sample (``n_gen``; 1 for a prompt test), cache depth, threads and ms per forward of each
    repetition (``pass_ms``)."""

    model_type: str
    rows: int
    forwards: int
    depth_tokens: int
    threads: int
    pass_ms: tuple[float, ...]
    commit: str = ""
    cpu_info: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def context_tokens(self) -> float:
        """The mean cache length the timed forwards start from (a generation test's grows by one each)."""
        return self.depth_tokens + (self.forwards - 1) / 2


@dataclass(frozen=True)
class BatchedRecord:
    """One ``llama-batched-bench`` point: ``sequences`` of ``prompt_tokens`` each, ``steps`` generation
    steps of one row per sequence; the prompt's and the steps' seconds."""

    prompt_tokens: int
    steps: int
    sequences: int
    threads: int
    prompt_s: float
    steps_s: float
    schema_version: int = SCHEMA_VERSION

    @property
    def step_ms(self) -> float:
        """ms of one generation step over every sequence."""
        return 1000.0 * self.steps_s / max(self.steps, 1)

    @property
    def context_tokens(self) -> float:
        """The mean positions each sequence attends over during the steps."""
        return self.prompt_tokens + (self.steps - 1) / 2


def _lines(text: str, where: str) -> list[dict]:
    out = []
    for i, line in enumerate(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue  # llama.cpp's log lines around the records
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise SpecsimError(f"{where} line {i + 1}: not JSON ({err.msg})") from None
    if not out:
        raise SpecsimError(f"{where}: no JSON records")
    return out


def parse_bench_jsonl(text: str) -> list[BenchRecord]:
    """Every test of a ``llama-bench -o jsonl`` run; SpecsimError naming a missing field."""
    out = []
    for i, d in enumerate(_lines(text, "llama-bench output")):
        try:
            n_prompt, n_gen = int(d["n_prompt"]), int(d["n_gen"])
            if (n_prompt > 0) == (n_gen > 0):
                raise SpecsimError(
                    f"llama-bench record {i}: expected a prompt or a generation test (-pg is not)"
                )
            forwards = n_gen if n_gen else 1
            out.append(
                BenchRecord(
                    model_type=str(d["model_type"]),
                    rows=n_prompt if n_prompt else 1,
                    forwards=forwards,
                    depth_tokens=int(d.get("n_depth", 0)),
                    threads=int(d["n_threads"]),
                    pass_ms=tuple(float(s) / 1e6 / forwards for s in d["samples_ns"]),
                    commit=str(d.get("build_commit", "")),
                    cpu_info=str(d.get("cpu_info", "")),
                )
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SpecsimError(f"llama-bench record {i}: field {err}") from None
    return out


def parse_batched_jsonl(text: str) -> list[BatchedRecord]:
    """Every point of a ``llama-batched-bench --output-format jsonl`` run."""
    out = []
    for i, d in enumerate(_lines(text, "llama-batched-bench output")):
        try:
            out.append(
                BatchedRecord(
                    prompt_tokens=int(d["pp"]),
                    steps=int(d["tg"]),
                    sequences=int(d["pl"]),
                    threads=int(d["n_threads"]),
                    prompt_s=float(d["t_pp"]),
                    steps_s=float(d["t_tg"]),
                )
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SpecsimError(f"llama-batched-bench record {i}: field {err}") from None
    return out
