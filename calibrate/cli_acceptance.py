"""``specsim calibrate acceptance``: teacher-forced acceptance traces of every drafting method into a profile.

Plug-in of :mod:`specsim.cli`; torch is imported only inside the command. The shared model/prompt
set-up (:class:`Setup`, :func:`load_setup`) also serves ``specsim check`` (:mod:`calibrate.cli_check`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from specsim.bounds import number_arg
from specsim.errors import SpecsimError, warn
from specsim.jsonio import check_writable, read_json, write_json_atomic
from specsim.profile import Profile, Provenance, load_profile, save_profile

PARTIAL_SCHEMA = 1


def register(subparsers, calibrate_subparsers) -> None:
    """Add ``calibrate acceptance``."""
    acc = calibrate_subparsers.add_parser(
        "acceptance", help="teacher-forced acceptance traces (match, beta) into a profile",
        description="Target greedy output per prompt, then one forward of each model over it: per position "
                    "match = [draft argmax == target token] (greedy) and beta = sum_x min(p, q) (sampling). "
                    "Resumable: finished prompts are kept in OUT.partial.json.")
    _model_args(acc)
    acc.add_argument("--out", required=True, help="profile JSON to create or update")
    acc.add_argument("--temperature", type=number_arg("temperature"), default=1.0,
                     help="temperature of p and q for beta (default 1)")
    _method_args(acc)
    acc.add_argument("--scenario", default=None, help="scenario name (default: the prompt set's name; image "
                     "prompts get '-<n>img' appended per images-per-prompt group)")
    acc.add_argument("--top-k", type=number_arg("size", integer=True, zero_ok=True), default=0, metavar="K",
                     help="also store per position the rank of the target's token in the draft's greedy "
                          "distribution and the draft's K largest probabilities (token-tree and confidence-policy "
                          "replay; default 0 = off)")
    acc.add_argument("--reference-gamma", type=number_arg("gamma", integer=True), default=5,
                     help="gamma of the stored single-gamma tau and histogram (default 5)")
    acc.add_argument("--restart", action="store_true", help="ignore a partial file from an interrupted run")
    acc.set_defaults(func=cmd_acceptance)


def _method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", action="append", default=None, metavar="METHOD",
                   help="drafting method, repeatable: plain (text pairs; the default), M (multimodal), T (text-only), "
                        "C (caption), F (target-features), P<n> (pooled to n tokens per image), ensembles such as "
                        "MT, MC, MTC, MTCP4, and adaptive:MTC")
    p.add_argument("--captioner", default=None, help="captioner VLM for C (default: the preset's captioner)")
    p.add_argument("--caption-prefix", default="Image: ", help="text before each caption (default 'Image: ')")


def _model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--preset", help="pair name from calibrate/presets/pairs.json (e.g. qwen2.5-coder-0.5b-1.5b)")
    p.add_argument("--target", help="target: HF id, local folder, .gguf file or config JSON (with --draft)")
    p.add_argument("--draft", help="draft model spec (with --target)")
    p.add_argument("--random-weights", action="store_true", help="architecture only (random weights)")
    p.add_argument("--prompts", default=None, help="built-in prompt set or JSONL file (default: the preset's "
                   "prompt set, else reference)")
    p.add_argument("--allow-outside-images", action="store_true", help="let prompt images lie outside the prompt "
                   "file's folder (absolute paths, '..', symlinks out)")
    p.add_argument("--limit", type=number_arg("size", integer=True), default=None, help="use only the first N prompts")
    p.add_argument("--max-new-tokens", type=number_arg("tokens", integer=True), default=64,
                   help="new tokens per prompt (default 64)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# --------------------------------------------------------------------------- shared set-up
@dataclass
class Setup:
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
        """Scenario name of a group: ``name`` (default: the prompt set's) plus '-<n>img' for image groups."""
        base = name or self.name
        return base if images_per_prompt == 0 else f"{base}-{images_per_prompt}img"

    def drafter(self, method: str):
        from calibrate.drafting import Method

        return Method.parse(method).make_drafter(self.target, self.draft, captioner=self.captioner,
                                                 caption_prefix=self.caption_prefix, device=self.target.device)


def _byte_ids(text: str, vocab: int):
    """Architecture-only models have no tokenizer: ids = UTF-8 bytes mod vocab (timing is what matters)."""
    import torch

    return torch.tensor([[b % vocab for b in text.encode("utf-8")] or [0]], dtype=torch.long)


def _open_images(prompt) -> list:
    """The prompt's images as RGB (paths were checked at load: inside the folder, regular files).

    Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS) is an error here, not a warning.
    """
    import warnings

    from PIL import Image

    out = []
    for path in prompt.images:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(path) as img:
                    out.append(img.convert("RGB"))
        except (Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
            raise SpecsimError(f"prompt {prompt.id!r}: image {path!r} is too large to decode safely ({err}); "
                               "a decompression bomb?") from None
        except (OSError, ValueError, SyntaxError) as err:
            raise SpecsimError(f"prompt {prompt.id!r}: cannot read image {path!r} ({err.__class__.__name__})") from None
    return out


def _methods(given: list[str] | None, has_images: bool) -> list[str]:
    from calibrate.drafting import PLAIN, Method

    methods = list(dict.fromkeys(Method.parse(m).code for m in (given or [PLAIN])))
    if has_images and PLAIN in methods:
        raise SpecsimError("--method: the prompts have images; expected multimodal methods such as --method M "
                           "--method T --method C (plain is for text-only pairs)")
    return methods


def load_setup(args, methods: list[str] | None = None, cache_captions: bool = True) -> Setup:
    """Models, prompts, encoded requests, methods (``methods``, else ``--method``) and captioner from the
    shared flags; ``cache_captions`` reuses an image's caption across methods (acceptance, not timing)."""
    from calibrate.drafting import CachedCaptioner, Method, hf_captioner, make_request
    from calibrate.engine import Request
    from calibrate.models import canonical_dtype, check_device, load_pair, model_from_spec
    from calibrate.presets import pair
    from calibrate.prompts import encode, load_prompts

    if args.max_new_tokens < 1:
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 1, got {args.max_new_tokens}")
    if not args.preset and not (args.target and args.draft):
        raise SpecsimError("models: expected --preset PAIR or both --target and --draft")
    check_device(args.device)
    canonical_dtype(args.dtype)
    preset = pair(args.preset) if args.preset else {}
    prompt_set = args.prompts or preset.get("prompts", "reference")
    prompts = load_prompts(prompt_set, limit=args.limit,
                           allow_outside_images=getattr(args, "allow_outside_images", False))
    methods = _methods(methods or args.method, any(p.images for p in prompts))
    target, draft = load_pair(args.preset or args.target, None if args.preset else args.draft, device=args.device,
                              dtype=args.dtype, threads=args.threads, random_weights=args.random_weights,
                              progress=not args.no_progress)
    tok = target.tokenizer
    reqs = []
    for p in prompts:
        if p.images:
            if target.processor is None:
                raise SpecsimError(f"prompt {p.id!r} has images but target {target.name!r} has no image processor "
                                   "(expected a VLM folder with processor files)")
            reqs.append(make_request(target.processor, p.text, _open_images(p), prompt_id=p.id))
            continue
        ids = encode(tok, p) if tok is not None else _byte_ids(p.text, target.vocab_size)
        reqs.append(Request(ids.to(target.device), text=p.text, prompt_id=p.id))
    for model in (target, draft):
        _check_positions(model, prompts, reqs, args.max_new_tokens)
    eos = getattr(getattr(target.model, "generation_config", None), "eos_token_id", None)
    if eos is None and tok is not None:
        eos = tok.eos_token_id
    captioner = None
    if any(Method.parse(m).needs_captioner for m in methods):
        spec = args.captioner or preset.get("captioner")
        if not spec:
            raise SpecsimError("--method C: caption drafting needs --captioner (an image-to-text VLM)")
        captioner = hf_captioner(model_from_spec(spec, device=args.device, dtype=args.dtype, threads=args.threads,
                                                 random_weights=False, seed=2))
        # Acceptance captions each image once for every method; a check times every request's own captions.
        captioner = CachedCaptioner(captioner) if cache_captions else captioner
    name = Path(prompt_set).stem if prompt_set.endswith(".jsonl") else prompt_set
    return Setup(target, draft, prompts, reqs, eos, name, methods, captioner, args.caption_prefix)


def _check_positions(model, prompts, requests, max_new_tokens: int) -> None:
    """SpecsimError when prompt + new tokens exceed a model's maximum positions (max_position_embeddings)."""
    limit = getattr(model.text_config, "max_position_embeddings", None)
    if not isinstance(limit, int):
        return
    for p, r in zip(prompts, requests):
        need = r.input_ids.shape[1] + max_new_tokens
        if need > limit:
            raise SpecsimError(f"prompt {p.id!r}: {r.input_ids.shape[1]} prompt tokens + --max-new-tokens "
                               f"{max_new_tokens} = {need} positions, but {model.name!r} has at most {limit} "
                               "(max_position_embeddings)")


def _progress(items, args, desc: str):
    if args.no_progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="prompt", file=sys.stderr)


def _provenance(setup: Setup, args) -> Provenance:
    import torch
    import transformers

    return Provenance(target=setup.target.name, draft=setup.draft.name, device=str(args.device),
                      dtype=setup.target.dtype, date=date.today().isoformat(), source="measured",
                      software={"torch": torch.__version__, "transformers": transformers.__version__},
                      weights=setup.target.weights, threads=torch.get_num_threads(),
                      notes=f"acceptance: prompts={setup.name}, max_new_tokens={args.max_new_tokens}"
                            + (f", caption prefix {setup.caption_prefix!r}" if setup.captioner else ""))


# --------------------------------------------------------------------------- acceptance
def cmd_acceptance(args) -> int:
    if args.reference_gamma < 1:
        raise SpecsimError(f"--reference-gamma: expected an integer >= 1, got {args.reference_gamma}")
    if not args.temperature > 0:
        raise SpecsimError(f"--temperature: expected > 0 for beta, got {args.temperature}")
    if args.top_k < 0 or (args.top_k and args.temperature != 1.0):
        raise SpecsimError(f"--top-k: expected an integer >= 0 with --temperature 1 (ranks are of the greedy draft "
                           f"distribution), got --top-k {args.top_k} at --temperature {args.temperature}")
    check_writable(args.out, "--out")
    check_writable(_partial_path(Path(args.out)), "--out's partial file")
    run_acceptance(load_setup(args), args)
    return 0


def run_acceptance(setup: Setup, args) -> list:
    """Traces for every method × prompt (resuming from ``<out>.partial.json``), merged into ``--out``.

    One entry per method and images-per-prompt group. The target's greedy output and logits are computed
    once per prompt and shared by all methods.
    """
    from calibrate.acceptance import acceptance_entry, acceptance_trace, drafter_trace, target_reference
    from calibrate.drafting import PLAIN, Method

    out = Path(args.out)
    partial = _partial_path(out)
    key = {"target": setup.target.name, "draft": setup.draft.name, "prompts": _digest(setup.prompts),
           "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "dtype": setup.target.dtype,
           "eos": setup.eos, "caption_prefix": setup.caption_prefix, "top_k": getattr(args, "top_k", 0)}
    done = {} if args.restart else _read_partial(partial, key)
    kw = {"max_new_tokens": args.max_new_tokens, "eos_token_id": setup.eos, "device": args.device}
    drafters = {m: setup.drafter(m) for m in setup.methods if m != PLAIN}
    for req in _progress(setup.requests, args, "acceptance"):
        todo = [m for m in setup.methods if _trace_key(m, req.prompt_id) not in done]
        ref = None
        for m in todo:
            if m == PLAIN:
                pt = acceptance_trace(setup.target, setup.draft, req, temperature=args.temperature,
                                      top_k=key["top_k"], **kw)
            else:
                ref = ref or target_reference(setup.target, req, **kw)
                pt = drafter_trace(setup.target, drafters[m], req, temperature=args.temperature, reference=ref,
                                   top_k=key["top_k"], **kw)
            done[_trace_key(m, req.prompt_id)] = pt
        if todo:
            write_json_atomic(partial, {"schema_version": PARTIAL_SCHEMA, "key": key,
                                        "traces": [{"method": k[0], **t.to_json()} for k, t in done.items()]})
    tasks = {p.id: p.task for p in setup.prompts}
    entries = []
    for n, reqs in setup.groups.items():
        for m in setup.methods:
            traces = [done[_trace_key(m, r.prompt_id)] for r in reqs]
            scenario = setup.scenario(n, args.scenario)
            entry = acceptance_entry(
                traces, method=m, scenario=scenario, images_per_prompt=n,
                task=",".join(sorted({tasks[r.prompt_id] for r in reqs if tasks[r.prompt_id]})),
                reference_gamma=args.reference_gamma,
                notes=f"teacher-forced on target greedy output, {args.max_new_tokens} new tokens, "
                      f"beta at T={args.temperature}", **Method.parse(m).costs(n))
            entries.append(entry)
            print(f"{scenario}/{m}: {len(traces)} prompts, {sum(len(t.trace.match) for t in traces)} positions, "
                  f"match rate {_mean_match(traces):.3f}, tau(gamma={args.reference_gamma}) = {entry.tau:.3f}")
    profile = load_profile(str(out)) if out.is_file() else Profile(provenance=_provenance(setup, args),
                                                                   name=out.stem)
    save_profile(profile.with_acceptance(entries), out)
    partial.unlink(missing_ok=True)
    print(f"-> {out}")
    return entries


def _trace_key(method: str, prompt_id: str) -> tuple[str, str]:
    return (method, prompt_id)


def _digest(prompts) -> str:
    return hashlib.sha256(json.dumps([p.to_json() for p in prompts], sort_keys=True).encode()).hexdigest()[:16]


def _partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.json")


def _read_partial(path: Path, key: dict) -> dict:
    """Finished traces of an interrupted run with the same ``key``; {} when there are none.

    A broken partial file only costs a rerun: it is reported on stderr, ignored, and overwritten.
    """
    import os

    if not os.path.lexists(path):
        return {}
    try:
        data = read_json(path, "partial traces")
        return _partial_traces(data, key, f"partial traces {str(path)!r}")
    except SpecsimError as err:
        warn(f"{err}; ignoring it and tracing every prompt again")
        return {}


def _partial_traces(data, key: dict, where: str) -> dict:
    """(method, prompt id) -> PromptTrace of a partial file's JSON ({} for another run's key)."""
    from calibrate.acceptance import PromptTrace

    if not isinstance(data, dict) or type(data.get("schema_version")) is not int \
            or data["schema_version"] != PARTIAL_SCHEMA:
        raise SpecsimError(f"{where}: expected an object with schema_version {PARTIAL_SCHEMA} written by this tool")
    if not isinstance(data.get("key"), dict):
        raise SpecsimError(f"{where}.key: expected an object, got {str(data.get('key'))[:60]!r}")
    if data["key"] != key:
        return {}  # another prompt set, model or setting: nothing to reuse
    traces = data.get("traces")
    if not isinstance(traces, list):
        raise SpecsimError(f"{where}.traces: expected a list, got {str(traces)[:60]!r}")
    out = {}
    for i, t in enumerate(traces):
        if not isinstance(t, dict) or not isinstance(t.get("method", "plain"), str):
            raise SpecsimError(f"{where}.traces[{i}]: expected an object with a 'method' string")
        pt = PromptTrace.from_json({k: v for k, v in t.items() if k != "method"}, f"{where}.traces[{i}]")
        out[_trace_key(t.get("method", "plain"), pt.trace.prompt_id)] = pt
    return out


def _mean_match(traces) -> float:
    total = sum(len(t.trace.match) for t in traces)
    return sum(sum(t.trace.match) for t in traces) / max(total, 1)
