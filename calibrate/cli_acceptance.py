"""``specsim calibrate acceptance`` (teacher-forced traces → profile) and ``specsim check`` (real SD vs prediction).

Plug-in of :mod:`specsim.cli`; torch is imported only inside the commands. ``check`` runs, per
prompt, target-only decoding, then speculative decoding at every γ (order rotated per prompt),
then target-only again, so slow drift of the machine hits both sides alike; speedups are
decode-phase ms per token (prefills excluded on both sides, reported apart).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.profile import (
    Profile,
    Provenance,
    load_profile,
    resolve_profile_path,
    save_profile,
    write_json_atomic,
)

PARTIAL_SCHEMA = 1


def register(subparsers, calibrate_subparsers) -> None:
    """Add ``calibrate acceptance`` and ``check``."""
    acc = calibrate_subparsers.add_parser(
        "acceptance", help="teacher-forced acceptance traces (match, beta) into a profile",
        description="Target greedy output per prompt, then one forward of each model over it: per position "
                    "match = [draft argmax == target token] (greedy) and beta = sum_x min(p, q) (sampling). "
                    "Resumable: finished prompts are kept in OUT.partial.json.")
    _model_args(acc)
    acc.add_argument("--out", required=True, help="profile JSON to create or update")
    acc.add_argument("--temperature", type=float, default=1.0, help="temperature of p and q for beta (default 1)")
    _method_args(acc)
    acc.add_argument("--scenario", default=None, help="scenario name (default: the prompt set's name; image "
                     "prompts get '-<n>img' appended per images-per-prompt group)")
    acc.add_argument("--top-k", type=int, default=0, metavar="K",
                     help="also store per position the rank of the target's token in the draft's greedy "
                          "distribution and the draft's K largest probabilities (token-tree and confidence-policy "
                          "replay; default 0 = off)")
    acc.add_argument("--reference-gamma", type=int, default=5,
                     help="gamma of the stored single-gamma tau and histogram (default 5)")
    acc.add_argument("--restart", action="store_true", help="ignore a partial file from an interrupted run")
    acc.set_defaults(func=cmd_acceptance)

    chk = subparsers.add_parser(
        "check", help="run real speculative decoding and compare with the profile's prediction",
        description="Per gamma: tau and decode-phase speedup over target-only decoding, predicted "
                    "(tau from trace replay, speedup = tau/(gamma*c + v) with measured c = Tq/Tp, v = Tv/Tp) "
                    "vs measured (wall clock, same run, interleaved), and the textbook prediction (v = 1, "
                    "i.i.d. alpha). Writes the rows into the profile's checks.")
    chk.add_argument("--profile", required=True, help="profile with latency and acceptance sections")
    chk.add_argument("--gamma", default="1,2,3,4,6,8", help="comma-separated gammas (default 1,2,3,4,6,8)")
    _model_args(chk, required=False)
    _method_args(chk)
    chk.add_argument("--scenario", default=None, help="scenario name as in 'calibrate acceptance' (default: the "
                     "prompt set's name)")
    chk.add_argument("--json", action="store_true", help="print JSON instead of the table")
    chk.add_argument("--no-write", action="store_true", help="do not write the rows into the profile")
    chk.set_defaults(func=cmd_check)


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
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt (default 64)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
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
        from calibrate.methods import make_method_drafter

        return make_method_drafter(method, self.target, self.draft, captioner=self.captioner,
                                   caption_prefix=self.caption_prefix, device=self.target.device)


def _byte_ids(text: str, vocab: int):
    """Architecture-only models have no tokenizer: ids = UTF-8 bytes mod vocab (timing is what matters)."""
    import torch

    return torch.tensor([[b % vocab for b in text.encode("utf-8")] or [0]], dtype=torch.long)


def _open_images(prompt) -> list:
    from PIL import Image

    out = []
    for path in prompt.images:
        try:
            with Image.open(path) as img:
                out.append(img.convert("RGB"))
        except OSError as err:
            raise SpecsimError(f"prompt {prompt.id!r}: cannot read image {path!r} ({err.__class__.__name__})") from None
    return out


def _methods(args, has_images: bool) -> list[str]:
    from calibrate.methods import PLAIN, canonical_method

    methods = list(dict.fromkeys(canonical_method(m) for m in (args.method or [PLAIN])))
    if has_images and PLAIN in methods:
        raise SpecsimError("--method: the prompts have images; expected multimodal methods such as --method M "
                           "--method T --method C (plain is for text-only pairs)")
    return methods


def load_setup(args) -> Setup:
    """Models, prompts, encoded requests, methods and captioner from the shared flags."""
    from calibrate.draft_contexts import make_request
    from calibrate.engine import Request
    from calibrate.methods import CachedCaptioner, hf_captioner, needs_captioner
    from calibrate.models import load_pair, model_from_spec
    from calibrate.presets import pair
    from calibrate.prompts import encode, load_prompts

    if args.max_new_tokens < 1:
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 1, got {args.max_new_tokens}")
    if not args.preset and not (args.target and args.draft):
        raise SpecsimError("models: expected --preset PAIR or both --target and --draft")
    preset = pair(args.preset) if args.preset else {}
    prompt_set = args.prompts or preset.get("prompts", "reference")
    prompts = load_prompts(prompt_set, limit=args.limit)
    methods = _methods(args, any(p.images for p in prompts))
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
    eos = getattr(getattr(target.model, "generation_config", None), "eos_token_id", None)
    if eos is None and tok is not None:
        eos = tok.eos_token_id
    captioner = None
    if needs_captioner(methods):
        spec = args.captioner or preset.get("captioner")
        if not spec:
            raise SpecsimError("--method C: caption drafting needs --captioner (an image-to-text VLM)")
        captioner = CachedCaptioner(hf_captioner(model_from_spec(spec, device=args.device, dtype=args.dtype,
                                                                 threads=args.threads, random_weights=False, seed=2)))
    name = Path(prompt_set).stem if prompt_set.endswith(".jsonl") else prompt_set
    return Setup(target, draft, prompts, reqs, eos, name, methods, captioner, args.caption_prefix)


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
    run_acceptance(load_setup(args), args)
    return 0


def run_acceptance(setup: Setup, args) -> list:
    """Traces for every method × prompt (resuming from ``<out>.partial.json``), merged into ``--out``.

    One entry per method and images-per-prompt group. The target's greedy output and logits are computed
    once per prompt and shared by all methods.
    """
    from calibrate.acceptance import acceptance_entry, acceptance_trace, drafter_trace, target_reference
    from calibrate.methods import PLAIN, method_costs

    out = Path(args.out)
    partial = out.with_name(out.name + ".partial.json")
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
                      f"beta at T={args.temperature}", **method_costs(m, n))
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


def _read_partial(path: Path, key: dict) -> dict:
    from calibrate.acceptance import PromptTrace

    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}  # a broken partial file only costs a rerun
    if data.get("schema_version") != PARTIAL_SCHEMA or data.get("key") != key:
        return {}
    out = {}
    for t in data.get("traces", []):
        pt = PromptTrace.from_json({k: v for k, v in t.items() if k != "method"})
        out[_trace_key(t.get("method", "plain"), pt.trace.prompt_id)] = pt
    return out


def _mean_match(traces) -> float:
    total = sum(len(t.trace.match) for t in traces)
    return sum(sum(t.trace.match) for t in traces) / max(total, 1)


# --------------------------------------------------------------------------- check
def parse_gammas(text: str) -> list[int]:
    """'1,2,3' -> [1, 2, 3]; SpecsimError for anything but integers ≥ 1."""
    try:
        gammas = [int(g) for g in str(text).split(",") if g.strip()]
    except ValueError:
        raise SpecsimError(f"--gamma: expected comma-separated integers >= 1, got {text!r}") from None
    if not gammas or any(g < 1 for g in gammas):
        raise SpecsimError(f"--gamma: expected comma-separated integers >= 1, got {text!r}")
    return sorted(set(gammas))


def run_check(setup: Setup, gammas: list[int], *, max_new_tokens: int, device="cpu", progress=None):
    """Interleaved real runs: {(method, γ): [DecodeResult per prompt]} and the target-only runs (two per prompt).

    Per prompt: target-only, then every method × γ (order rotated per prompt), then target-only again.
    """
    from calibrate.engine import speculative_decode, target_decode

    kw = {"max_new_tokens": max_new_tokens, "eos_token_id": setup.eos, "device": device}
    drafters = {m: setup.drafter(m) for m in setup.methods}
    warm = setup.requests[0]
    target_decode(setup.target, warm, **kw | {"max_new_tokens": 4})
    for d in drafters.values():
        speculative_decode(setup.target, d, warm, gamma=max(gammas), **kw | {"max_new_tokens": 4})
    runs = [(m, g) for m in setup.methods for g in gammas]
    sd = {r: [] for r in runs}
    base = []
    for i, req in enumerate(progress(setup.requests) if progress else setup.requests):
        base.append(target_decode(setup.target, req, **kw))
        for m, g in runs[i % len(runs):] + runs[: i % len(runs)]:
            sd[(m, g)].append(speculative_decode(setup.target, drafters[m], req, gamma=g, **kw))
        base.append(target_decode(setup.target, req, **kw))
    return sd, base


def measured_rows(sd: dict, base: list):
    """{γ: Measured} from the runs (decode-phase ms per token, τ = tokens / blocks)."""
    from specsim.check import Measured

    base_ms = sum(r.decode_ms for r in base) / sum(len(r.tokens) for r in base)
    out = {}
    for g, runs in sd.items():
        tokens = sum(len(r.tokens) for r in runs)
        out[g] = Measured(gamma=g, tau=tokens / sum(len(r.blocks) for r in runs),
                          sd_ms_per_token=sum(r.decode_ms for r in runs) / tokens, target_ms_per_token=base_ms,
                          prompts=len(runs), new_tokens=max(len(r.tokens) for r in runs))
    return out


def replay_agreement(entry, sd: dict) -> tuple[int, int]:
    """(#(prompt, γ) whose engine block count equals the trace replay's, #compared)."""
    from specsim.replay import replay_blocks_per_prompt

    by_id = {t.prompt_id: t for t in entry.traces if t.match is not None}
    same = total = 0
    for g, runs in sd.items():
        for r in runs:
            trace = by_id.get(r.prompt_id)
            if trace is None or len(trace.match) != len(r.tokens):
                continue
            total += 1
            same += int(replay_blocks_per_prompt([trace], g)[0] == len(r.blocks))
    return same, total


def _entry(profile: Profile, method, scenario):
    cands = [a for a in profile.acceptance if (method is None or a.method == method)
             and (scenario is None or a.scenario == scenario)]
    if not cands:
        known = ", ".join(f"{a.method}/{a.scenario}" for a in profile.acceptance) or "none"
        raise SpecsimError(f"profile has no acceptance entry for method={method!r} scenario={scenario!r} "
                           f"(has: {known}; run 'specsim calibrate acceptance' first)")
    return cands[0]


def cmd_check(args) -> int:
    from specsim.check import check_row, format_table, summary

    gammas = parse_gammas(args.gamma)
    profile_path = resolve_profile_path(args.profile)
    profile = load_profile(str(profile_path))
    if profile.latency.target_decode_ms_by_context is None:
        raise SpecsimError(f"profile {args.profile!r} has no latency section (run 'specsim calibrate latency' first)")
    if args.method is None and len({a.method for a in profile.acceptance}) == 1 and profile.acceptance:
        args.method = [profile.acceptance[0].method]  # a single-method profile needs no --method
    setup = load_setup(args)
    groups = setup.groups
    entries = {(m, n): _entry(profile, m, setup.scenario(n, args.scenario) if n or args.scenario else None)
               for m in setup.methods for n in groups}
    sd, base = run_check(setup, gammas, max_new_tokens=args.max_new_tokens, device=args.device,
                         progress=None if args.no_progress else (lambda xs: _progress(xs, args, "check")))
    rows, agreement, stages = [], {}, {}
    for n, reqs in groups.items():
        ids = [r.prompt_id for r in reqs]
        context = sum(r.input_ids.shape[1] for r in reqs) / len(ids) + args.max_new_tokens / 2
        for m in setup.methods:
            entry = entries[(m, n)]
            group_sd = {g: _of_prompts(sd[(m, g)], ids) for g in gammas}
            measured = measured_rows(group_sd, _of_prompts(base, ids))
            rows += [check_row(profile, entry, measured[g], prompt_ids=ids, context_tokens=context) for g in gammas]
            agreement[(m, entry.scenario)] = replay_agreement(entry, group_sd)
            stages[(m, entry.scenario)] = _stage_shares(group_sd)
    if not args.no_write:
        save_profile(profile.with_checks(rows), profile_path)
    if args.json:
        print(json.dumps({"rows": [r.to_json() for r in rows], "summary": summary(rows),
                          "replay_equals_engine": {f"{m}/{s}": list(v) for (m, s), v in agreement.items()},
                          "stages": {f"{m}/{s}": v for (m, s), v in stages.items()}}, indent=1))
        return 0
    print(format_table(rows))
    for (m, s), (same, total) in agreement.items():
        print(f"{s}/{m}: greedy tau, trace replay == engine for {same}/{total} (prompt, gamma)")
    if len(stages) == 1:
        for g, st in next(iter(stages.values())).items():
            print(f"gamma={g}: " + ", ".join(f"{k} {v:.1%}" for k, v in st.items()) + " of decode time")
    return 0


def _of_prompts(runs: list, prompt_ids: list[str]) -> list:
    """The runs of the given prompts (one scenario group), in run order."""
    wanted = set(prompt_ids)
    return [r for r in runs if r.prompt_id in wanted]


def _stage_shares(sd: dict) -> dict:
    """Per γ: share of decode-phase time in draft forwards, target verification and non-model overhead."""
    out = {}
    for g, runs in sd.items():
        total = sum(r.decode_ms for r in runs)
        st = [r.stage_ms() for r in runs]
        out[g] = {k.removesuffix("_ms"): sum(s[k] for s in st) / total
                  for k in ("draft_generation_ms", "target_verification_ms", "overhead_ms")}
    return out
