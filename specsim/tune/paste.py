"""The engine settings that paste, for a tuned deployment: vLLM, SGLang, TensorRT-LLM and llama.cpp.

The deployment's serving γ policy becomes a schedule over decode batches 1..``max_num_seqs``
(:func:`policy_schedule`), written by :mod:`specsim.engines.engine_config`: vLLM's
``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule`` hold it; SGLang and
llama.cpp take one draft length, the schedule's at the load's mean concurrency (Little's law), as said in a
note. Models are named by their Hugging Face id: a shipped config's or preset's, or ``--model-id
NAME=ID``; a model without one keeps its name, and a note says to replace it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from specsim.draft_shapes.policies import GammaPolicy
from specsim.engines.engine_config import (
    is_model_id,
    llama_cpp_server_args,
    sglang_args_for_gamma,
    trtllm_speculative_config,
    vllm_config_for_schedule,
)
from specsim.errors import SpecsimError
from specsim.hardware.model_resolution import find_shipped
from specsim.presets import preset_meta, preset_names
from specsim.tune.kinds import drafting_kind
from specsim.tune.study import TrialRecord


@dataclass(frozen=True)
class EngineConfigs:
    """One deployment's settings per engine (a config or flags; None: serve without SD) and the command
    lines that carry them, with what a reader must know (notes)."""

    schedule: tuple[tuple[int, int, int], ...]
    single_gamma: int
    vllm: dict | None
    sglang: tuple[str, ...] | None
    tensorrt_llm: dict | None
    llama_cpp: tuple[str, ...] | None
    commands: tuple[tuple[str, str], ...]  # (engine, command line)
    notes: tuple[str, ...]

    @property
    def trtllm_yaml(self) -> str | None:
        """The ``--extra_llm_api_options`` file's text (YAML; its value is JSON, a YAML flow mapping)."""
        return None if self.tensorrt_llm is None else f"speculative_config: {yaml_flow(self.tensorrt_llm)}"

    def to_json(self) -> dict:
        return {
            "schedule": [list(r) for r in self.schedule],
            "single_gamma": self.single_gamma,
            "vllm_speculative_config": self.vllm,
            "sglang_args": None if self.sglang is None else list(self.sglang),
            "tensorrt_llm_speculative_config": self.tensorrt_llm,
            "llama_cpp_args": None if self.llama_cpp is None else list(self.llama_cpp),
            "commands": dict(self.commands),
            "tensorrt_llm_yaml": self.trtllm_yaml,
            "notes": list(self.notes),
        }


def yaml_flow(value) -> str:
    """``value`` (dicts, strings, numbers) as one YAML flow node: strings JSON-quoted (valid YAML), integer
    keys bare, so TensorRT-LLM's ``draft_len_schedule`` keys load as integers."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_flow(k)}: {yaml_flow(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def policy_schedule(policy: GammaPolicy, max_batch: int) -> tuple[tuple[int, int, int], ...]:
    """[(first batch, last batch, γ), ...] of ``policy`` over decode batches 1..``max_batch`` (its
    :meth:`~specsim.draft_shapes.policies.GammaPolicy.table` cut there)."""
    rows = [(b, g) for b, g in policy.table() if b <= max_batch]
    ends = [b - 1 for b, _ in rows[1:]] + [max_batch]
    return tuple((b, end, g) for (b, g), end in zip(rows, ends))


def model_id(name: str, given: dict[str, str]) -> str | None:
    """``name``'s Hugging Face id: ``given`` (--model-id), a shipped config's, a preset's; None without."""
    if name in given:
        return given[name]
    found = find_shipped(name)
    if found is not None and is_model_id(found[1].id):
        return found[1].id
    ids = preset_meta(name).get("ids", []) if name in preset_names() else []
    return ids[0] if ids else None


def engine_configs(
    record: TrialRecord, target: str, *, max_num_batched_tokens: int, ids: dict[str, str] | None = None
) -> EngineConfigs:
    """The settings of ``record``'s deployment for every engine (module docstring)."""
    dep, ids = record.deployment, ids or {}
    kind = drafting_kind(dep.draft.kind)
    schedule = policy_schedule(dep.policy, dep.max_num_seqs)
    concurrency = record.result.mean_concurrency or 1.0
    at = int(min(max(round(concurrency), 1), dep.max_num_seqs))
    gamma = dep.policy.gamma_at(at)
    target_id, draft_id = model_id(target, ids), model_id(dep.draft.model, ids)
    notes = [
        f"{n} has no Hugging Face id here: replace {n!r} in the lines below, or give --model-id {n}=ORG/NAME"
        for n, i in ((target, target_id), (dep.draft.model, draft_id))
        if i is None
    ]
    target_id, draft_id = target_id or target, draft_id or dep.draft.model
    vllm = vllm_config_for_schedule(list(schedule), method=kind.vllm_method, draft_model=draft_id)
    sglang = sglang_args_for_gamma(gamma, algorithm=kind.sglang_algorithm, draft_model=draft_id)
    try:
        trt = trtllm_speculative_config(
            list(schedule), draft_model=draft_id, decoding_type=kind.trtllm_decoding_type
        )
    except SpecsimError as err:
        trt, notes = None, notes + [f"{err}: TensorRT-LLM gets no speculative_config"]
    kv = record.result.kv_cache_tokens
    llama = llama_cpp_server_args(
        gamma, draft_model="DRAFT.gguf", parallel=dep.max_num_seqs, context_tokens=kv
    )
    if max(g for _, _, g in schedule) == 0:
        notes.append("SD is off at every batch size: serve without speculative decoding")
    elif len({g for _, _, g in schedule}) > 1:
        notes.append(
            f"SGLang and llama.cpp take one draft length: {gamma}, the schedule's at batch {at} (the load's "
            "mean concurrency, requests/s x mean E2E)"
        )
    notes.append(
        "llama.cpp loads GGUF files: TARGET.gguf and DRAFT.gguf stand for yours; -c is the KV cache the "
        "simulation assumed, shared by the -np slots"
    )
    if kind.draft_image_tokens_per_image == 0:
        notes.append(
            f"drafting kind {kind.code}: priced with a draft prompt without the images ({kind.description})"
        )
    plain_llama = ["-np", str(dep.max_num_seqs)] + (["-c", str(kv)] if kv is not None else [])
    commands = _commands(dep, target_id, max_num_batched_tokens, vllm, sglang, trt, llama, plain_llama)
    return EngineConfigs(
        schedule,
        gamma,
        vllm,
        None if sglang is None else tuple(sglang),
        trt,
        None if llama is None else tuple(llama),
        commands,
        tuple(notes),
    )


def _commands(
    dep, target_id: str, budget: int, vllm, sglang, trt, llama, plain_llama
) -> tuple[tuple[str, str], ...]:
    """Each engine's server command line with the deployment's TP, sequences and speculative settings."""
    q = shlex.quote
    spec = f" --speculative-config {q(json.dumps(vllm))}" if vllm else ""
    out = [
        (
            "vLLM",
            f"vllm serve {q(target_id)} --tensor-parallel-size {dep.tp} --max-num-seqs {dep.max_num_seqs} "
            f"--max-num-batched-tokens {budget}{spec}",
        ),
        (
            "SGLang",
            f"python -m sglang.launch_server --model-path {q(target_id)} --tp-size {dep.tp} "
            f"--max-running-requests {dep.max_num_seqs}" + "".join(f" {q(a)}" for a in sglang or ()),
        ),
        (
            "TensorRT-LLM",
            f"trtllm-serve {q(target_id)} --tp_size {dep.tp} --max_batch_size {dep.max_num_seqs}"
            + (" --extra_llm_api_options spec.yaml" if trt else ""),
        ),
        (
            "llama.cpp",
            "llama-server -m TARGET.gguf" + "".join(f" {q(a)}" for a in llama or plain_llama),
        ),
    ]
    return tuple(out)
