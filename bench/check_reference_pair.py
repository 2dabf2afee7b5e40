"""Benchmark: `specsim check` on the Qwen2.5-Coder 0.5B (draft) / 1.5B (target) reference pair, CPU, fp32.

Steps (all resumable pieces write atomically into --profile):
1. latency section (calibrate.latency) if the profile has none, Tv measured at the prompts' mean context;
2. acceptance traces (teacher-forced, greedy target output, --max-new-tokens) for --limit prompts;
3. real speculative decoding at every γ interleaved with target-only decoding (specsim check);
   prints predicted vs measured τ and speedup, the textbook prediction, replay == engine agreement
   and the share of non-model overhead;
4. HF transformers `generate(assistant_model=...)` with a constant γ (confidence threshold off) and
   HF target-only `generate`, for each γ: both speedups and ours ÷ HF's (end to end, prefill included).

    python bench/check_reference_pair.py --limit 12 --max-new-tokens 64 --threads 2      # full (~1 h)
    python bench/check_reference_pair.py --limit 2 --max-new-tokens 32 --gamma 2,4 --skip-hf  # quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from calibrate import cli_acceptance as C

PAIR = "qwen2.5-coder-0.5b-1.5b"
DEFAULT_PROFILE = Path(__file__).resolve().parent.parent / "specsim/profiles/measured/qwen2.5-coder-0.5b-1.5b-cpu-check.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default=str(DEFAULT_PROFILE))
    p.add_argument("--prompts", default="reference")
    p.add_argument("--limit", type=int, default=12)
    p.add_argument("--check-limit", type=int, default=None,
                   help="run the check (real SD) on the first N of the traced prompts only (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--gamma", default="1,2,3,4,6,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-hf", action="store_true", help="skip the HF assisted-generation baseline")
    p.add_argument("--redo-acceptance", action="store_true")
    p.add_argument("--hf-only", action="store_true", help="only the HF generate(assistant_model=...) timings")
    p.add_argument("--out-json", default=None, help="also write all results here")
    return p.parse_args(argv)


def _setup(args):
    ns = argparse.Namespace(preset=PAIR, target=None, draft=None, random_weights=False, prompts=args.prompts,
                            limit=args.limit, max_new_tokens=args.max_new_tokens, device="cpu", dtype="float32",
                            threads=args.threads, no_progress=False)
    return ns, C.load_setup(ns)


def ensure_latency(setup, args, profile_path: Path, mean_context: int, gammas):
    from calibrate import latency as L
    from specsim.profile import load_profile

    if profile_path.is_file() and load_profile(str(profile_path)).latency.target_decode_ms_by_context is not None:
        return
    plan = L.default_plan(setup.target, contexts_tokens=(32, mean_context, 256), verify_context_tokens=mean_context,
                          gammas=tuple(gammas), batch_sizes=(1,), prefill_tokens=(16, 64, 128), max_repeats=12,
                          target_rel_halfwidth=0.03)
    L.calibrate_latency({"target": setup.target, "draft": setup.draft}, plan, profile_path,
                        name=profile_path.stem, notes=f"bench/check_reference_pair.py, threads={args.threads}")


def ensure_acceptance(ns, setup, args, profile_path: Path):
    from specsim.profile import load_profile

    prof = load_profile(str(profile_path))
    if not args.redo_acceptance and any(len(a.traces) >= args.limit and a.method == "plain" for a in prof.acceptance):
        return
    acc = argparse.Namespace(**vars(ns), out=str(profile_path), temperature=1.0, method="plain", scenario=None,
                             reference_gamma=5, restart=False)
    C.run_acceptance(setup, acc)


def hf_baseline(setup, gammas, max_new_tokens):
    """{γ: (HF SD ms, HF target ms, tokens)} summed over prompts; greedy, constant γ, no confidence cut."""
    import torch

    target, draft = setup.target.model, setup.draft.model
    out = {}
    common = {"do_sample": False, "max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens,
              "eos_token_id": None, "pad_token_id": setup.target.tokenizer.eos_token_id}
    with torch.inference_mode():
        ids0 = setup.requests[0].input_ids
        target.generate(ids0, **common | {"max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
        for g in gammas:
            sd_ms = base_ms = 0.0
            toks = 0
            for req in setup.requests:
                t0 = time.perf_counter()
                base = target.generate(req.input_ids, **common)
                base_ms += (time.perf_counter() - t0) * 1e3
                draft.generation_config.num_assistant_tokens = g
                draft.generation_config.num_assistant_tokens_schedule = "constant"
                draft.generation_config.assistant_confidence_threshold = 0.0
                t0 = time.perf_counter()
                sd = target.generate(req.input_ids, assistant_model=draft, **common)
                sd_ms += (time.perf_counter() - t0) * 1e3
                toks += sd.shape[1] - req.input_ids.shape[1]
                assert torch.equal(sd, base), "HF assisted generation is not lossless here"
            out[g] = (sd_ms, base_ms, toks)
    return out


def main(argv=None) -> int:
    import torch

    from specsim.check import check_row, format_table, summary
    from specsim.profile import load_profile, save_profile

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    gammas = C.parse_gammas(args.gamma)
    ns, setup = _setup(args)
    # EOS off: every prompt yields exactly max_new_tokens, as in the benchmark's definition
    setup.eos = None
    profile_path = Path(args.profile)
    checked = setup.requests[: args.check_limit or len(setup.requests)]
    mean_ctx = int(round(sum(r.input_ids.shape[1] for r in checked) / len(checked) + args.max_new_tokens / 2))
    if args.hf_only:
        setup.requests = checked
        for g, (hf_sd, hf_base, toks) in hf_baseline(setup, gammas, args.max_new_tokens).items():
            print(f"HF gamma={g}: target-only {hf_base / toks:.1f} ms/token, assisted {hf_sd / toks:.1f} ms/token "
                  f"(prefill included), speedup {hf_base / hf_sd:.3f}")
        return 0
    ensure_latency(setup, args, profile_path, mean_ctx, gammas)
    ensure_acceptance(ns, setup, args, profile_path)
    setup.requests = checked
    prof = load_profile(str(profile_path))
    entry = C._entry(prof, "plain", None)
    t0 = time.perf_counter()
    sd, base = C.run_check(setup, gammas, max_new_tokens=args.max_new_tokens, progress=lambda xs: C._progress(xs, ns, "check"))
    check_s = time.perf_counter() - t0
    measured = C.measured_rows(sd, base)
    ids = [r.prompt_id for r in setup.requests]
    rows = [check_row(prof, entry, measured[g], prompt_ids=ids, context_tokens=mean_ctx) for g in gammas]
    desc = (f"Qwen2.5-Coder-1.5B-Instruct target, -0.5B-Instruct draft (GGUF dequantised to fp32), CPU, "
            f"{args.threads} thread(s); traces on {len(setup.prompts)} reference prompts, check on "
            f"{len(checked)}; written by bench/check_reference_pair.py")
    save_profile(replace(prof.with_checks(rows), description=desc), profile_path)
    same, total = C.replay_agreement(entry, sd)
    print(format_table(rows))
    print(f"greedy tau: trace replay == engine for {same}/{total} (prompt, gamma); check took {check_s:.0f} s")
    for g, s in C._stage_shares(sd).items():
        print(f"gamma={g}: " + ", ".join(f"{k} {v:.1%}" for k, v in s.items()))
    results = {"rows": [r.to_json() for r in rows], "summary": summary(rows), "replay_equals_engine": [same, total],
               "stages": C._stage_shares(sd), "threads": args.threads, "prompts": len(ids),
               "max_new_tokens": args.max_new_tokens}
    if not args.skip_hf:
        hf = hf_baseline(setup, gammas, args.max_new_tokens)
        base_e2e = sum(r.total_ms for r in base) / 2  # two target-only runs per prompt
        print(f"{'gamma':>5} {'ours e2e':>9} {'HF e2e':>7} {'ours/HF':>8}   (speedup over own target-only, prefill incl.)")
        results["hf"] = {}
        for g in gammas:
            ours = base_e2e / sum(r.total_ms for r in sd[g])
            hf_sd, hf_base, _ = hf[g]
            theirs = hf_base / hf_sd
            print(f"{g:>5} {ours:9.3f} {theirs:7.3f} {ours / theirs:8.3f}")
            results["hf"][g] = {"ours_speedup": ours, "hf_speedup": theirs, "ratio": ours / theirs,
                                "hf_sd_ms": hf_sd, "hf_target_ms": hf_base}
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
