"""The engine settings that paste, for a tuned deployment: vLLM, SGLang, TensorRT-LLM and llama.cpp.

The serving γ policy becomes a schedule over decode batches 1..``max_num_seqs`` (:func:`policy_schedule`),
written by :mod:`specsim.engines.engine_config` under the drafting kind's engine names (the registry's
``engines``: vLLM method, SGLang algorithm, TensorRT-LLM decoding type; llama.cpp's flags for a draft model
only): vLLM's ``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule`` hold it;
SGLang and llama.cpp take its γ at the load's mean decode batch. Models by Hugging Face id: a shipped
config's or preset's, or ``--model-id NAME=ID``; else its name, and a note says so.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from specsim.draft_kinds.registry import DraftKind, draft_kind
from specsim.draft_shapes.policies import GammaPolicy
from specsim.engines.engine_config import (
    is_model_id,
    llama_cpp_server_args,
    llama_cpp_slot_flags,
    sglang_args_for_gamma,
    trtllm_speculative_config,
    vllm_config_for_schedule,
)
from specsim.errors import SpecsimError
from specsim.hardware.model_resolution import find_shipped
from specsim.presets import preset_meta, preset_names
from specsim.tune.study import TrialRecord
from specsim.tune.trial import IMAGE_AXIS


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
    if found is not None:  # its id, else an alias that is one (a shipped head's published org/name)
        hub = [n for n in (found[1].id, *found[1].names) if is_model_id(n)]
        if hub:
            return hub[0]
    ids = preset_meta(name).get("ids", []) if name in preset_names() else []
    return ids[0] if ids else None


def engine_configs(
    record: TrialRecord,
    target: str,
    *,
    max_num_batched_tokens: int,
    batch: int,
    ids: dict[str, str] | None = None,
) -> EngineConfigs:
    """The settings of ``record``'s deployment for every engine (module docstring); ``batch``: the load's
    mean decode batch (:func:`specsim.tune.trial.decode_batch`), where the one-γ engines take theirs."""
    dep, ids, at = record.deployment, ids or {}, batch
    kind = draft_kind(dep.draft.kind)
    schedule = policy_schedule(dep.policy, dep.max_num_seqs)
    gamma = dep.policy.gamma_at(at)
    draft = draft_name(kind, dep.draft.model, target)
    target_id, draft_id = model_id(target, ids), None if draft is None else model_id(draft, ids)
    sd_on = max(g for _, _, g in schedule) > 0  # SD off: the lines below name the target alone
    notes = [
        f"{n} has no Hugging Face id here: replace {n!r} in the lines below, or give --model-id {n}=ORG/NAME"
        for n, i in ((target, target_id), (draft, draft_id))
        if n is not None and i is None and (sd_on or n == target)
    ]
    target_id, draft_id = target_id or target, draft_id or draft
    kv, names, rows = record.result.kv_cache_tokens, kind.engines, list(schedule)
    vllm = sglang = trt = llama = None
    if max(g for _, _, g in schedule) > 0:  # each engine's writer, under the kind's name for it
        vllm = _written(
            notes,
            "vLLM",
            names.get("vllm"),
            kind,
            lambda m: vllm_config_for_schedule(rows, method=m, draft_model=draft_id),
        )
        if vllm is not None and not kind.has_model:  # the lookup's settings as priced (the kind's preset)
            vllm |= {k: v for k, v in kind.preset.items() if k.startswith("prompt_lookup_")}
        sglang = _written(
            notes,
            "SGLang",
            names.get("sglang"),
            kind,
            lambda m: sglang_args_for_gamma(gamma, algorithm=m, draft_model=draft_id),
        )
        trt = _written(
            notes,
            "TensorRT-LLM",
            names.get("tensorrt-llm"),
            kind,
            lambda m: trtllm_speculative_config(rows, draft_model=draft_id, decoding_type=m),
        )
        llama = _written(
            notes,
            "llama.cpp",
            "-md" if kind.name == "model" else None,
            kind,
            lambda _: llama_cpp_server_args(
                gamma, draft_model="DRAFT.gguf", parallel=dep.max_num_seqs, context_tokens=kv
            ),
        )
    if max(g for _, _, g in schedule) == 0:
        notes.append("SD is off at every batch size: serve without speculative decoding")
    elif len({g for _, _, g in schedule}) > 1:
        notes.append(
            f"SGLang and llama.cpp take one draft length: {gamma}, the schedule's at batch {at} (the load's "
            "mean decode batch: requests per step that decodes)"
        )
    files = "TARGET.gguf and DRAFT.gguf stand" if llama else "TARGET.gguf stands"
    notes.append(
        f"llama.cpp loads GGUF files: {files} for yours; -c is the KV cache the simulation assumed, shared "
        "by the -np slots (-kvu: one pool, not -c / -np each)"
    )
    if kind.name == "mtp" and sd_on:  # priced from the target's shape; the engines run its checkpoint's
        notes.append(
            f"drafting kind mtp runs the MTP layers of the target's checkpoint: the engines need {target_id} "
            "to ship them (as DeepSeek-V3's num_nextn_predict_layers); priced as one layer of its shape"
        )
    if dep.draft.images != "M":
        notes.append(f"drafting kind {kind.name}, image axis {dep.draft.images}: priced as {IMAGE_AXIS['T']}")
    plain_llama = llama_cpp_slot_flags(dep.max_num_seqs, kv)
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


def draft_name(kind: DraftKind, model: str | None, target: str) -> str | None:
    """The draft model or head the kind runs (a head kind's preset head for the target, as ``serve`` picks
    it: :func:`specsim.hardware.draft_heads.draft_side`); None for a lookup kind or MTP on the target."""
    if model or not kind.is_head:
        return model
    found = find_shipped(target)
    return kind.head_for(found[1].id if found else target)


def _written(notes: list, engine: str, name: str | None, kind: DraftKind, write):
    """``write(name)``, the engine's settings for the kind (None: SD off), or None with a note where the
    engine has no name for the kind or its writer refuses."""
    if name is None:
        notes.append(f"{engine} has no method for drafting kind {kind.name!r} here: no speculative settings")
        return None
    try:
        return write(name)
    except SpecsimError as err:
        notes.append(f"{err}: {engine} gets no speculative settings")
        return None


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
