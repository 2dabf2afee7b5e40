"""What ``specsim recommend`` writes beside its table: ``--config-out``'s engine settings, and a llama.cpp
profile's recommendation, priced from the profile's own measured passes."""

from __future__ import annotations

import os
import shlex

from specsim.cli.model_options import refuse_unread
from specsim.engines.llama_cpp import llama_recommendation
from specsim.errors import SpecsimError, warn
from specsim.jsonio import dumps_json, write_json_atomic, write_text_atomic
from specsim.profile_format import MethodAcceptance, Profile

PLACEHOLDER_GGUF = "DRAFT.gguf"  # the draft's file in printed llama-server flags where none was given
# what a llama.cpp profile's recommendation reads; the rest shapes the roofline plan it does not make
_LLAMA_READS = {"engine", "profile", "acceptance", "method", "scenario", "gamma_max", "min_speedup",
                "draft_model", "out", "config_out", "json"}  # fmt: skip


def llama_measured(args, profile: Profile, entry: MethodAcceptance, gamma_max: int | None) -> int:
    """llama-server flags for the best γ up to ``gamma_max`` (--gamma-max, parsed; None: the profile's grid)
    of a llama.cpp profile, priced from its own passes."""
    why = "shapes the roofline plan, and a llama.cpp profile is priced from its own measured passes"
    refuse_unread(args, _LLAMA_READS, why)
    out = llama_recommendation(
        profile, entry, args.min_speedup, args.draft_model or PLACEHOLDER_GGUF, gamma_max
    )
    check_gguf_draft(args.config_out, out["config"])
    if args.out:
        write_json_atomic(args.out, {k: v for k, v in out.items() if k != "text"})
    if args.config_out:
        write_config(args.config_out, None if out["config"] is None else shlex.join(out["config"]) + "\n")
    print(dumps_json(out) if args.json else out.pop("text"))
    return 0


def check_gguf_draft(config_out: str | None, flags) -> None:
    """SpecsimError before anything is written where --config-out would save llama-server flags whose draft
    (``-md``) is the placeholder DRAFT.gguf or no GGUF file (a Hub id): llama-server loads a local file."""
    if not (config_out and flags and "-md" in flags):
        return
    draft = flags[flags.index("-md") + 1]
    if draft == PLACEHOLDER_GGUF:
        raise SpecsimError(
            f"--config-out: llama-server loads the draft from a GGUF file, and the flags hold the "
            f"placeholder {PLACEHOLDER_GGUF}: give --draft-model PATH.gguf"
        )
    if not draft.lower().endswith(".gguf"):
        raise SpecsimError(f"--draft-model: llama-server loads a GGUF file (-md PATH.gguf), got {draft!r}")


def write_config(path: str, text: str | None) -> None:
    """--config-out's settings; None (SD off): a warning (a script would read an older file as this run's)."""
    if text is not None:
        return write_text_atomic(path, text)
    older = " (the older file there is left as it was)" if os.path.exists(path) else ""
    warn(f"--config-out {path}: not written, there are no speculative settings to write: SD off{older}")
