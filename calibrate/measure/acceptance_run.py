"""A resumable acceptance run: traces of every method × prompt into a profile's acceptance entries.

Finished prompts are kept in ``<out>.partial.json`` (keyed by models, prompts and settings), so an
interrupted ``specsim calibrate acceptance`` resumes where it stopped. The traces themselves are
:mod:`calibrate.measure.acceptance_traces`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from calibrate.measure.latency_partial import show_value
from calibrate.workload.run_setup import Setup, progress, provenance
from specsim.errors import SpecsimError, warn
from specsim.jsonio import read_json, write_json_atomic
from specsim.profile_format import Profile
from specsim.profiles import load_profile, save_profile

PARTIAL_SCHEMA = 1


def run_acceptance(setup: Setup, args) -> list:
    """Traces for every method × prompt (resuming from ``<out>.partial.json``), merged into ``--out``.

    One entry per method and images-per-prompt group. The target's greedy output and logits, and its
    ``--sample-paths`` sampled paths, are computed once per prompt and shared by all methods.
    """
    from calibrate.drafting import PLAIN, Method
    from calibrate.measure.acceptance_traces import (
        acceptance_entry,
        acceptance_trace,
        drafter_trace,
        target_paths,
        target_reference,
    )

    out = Path(args.out)
    partial = partial_path(out)
    key = {
        "target": setup.target.name,
        "draft": setup.draft.name,
        "prompts": _digest(setup.prompts),
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "dtype": setup.target.dtype,
        "eos": setup.eos,
        "caption_prefix": setup.caption_prefix,
        "top_k": getattr(args, "top_k", 0),
    }
    n_paths, seed = getattr(args, "sample_paths", 0), getattr(args, "seed", 0)
    if n_paths:  # only then, so partials of runs without paths still resume
        key |= {"sample_paths": n_paths, "seed": seed}
    done = {} if args.restart else _read_partial(partial, key)
    kw = {"max_new_tokens": args.max_new_tokens, "eos_token_id": setup.eos, "device": args.device}
    drafters = {m: setup.drafter(m) for m in setup.methods if m != PLAIN}
    for req in progress(setup.requests, not args.no_progress, "acceptance"):
        todo = [m for m in setup.methods if _trace_key(m, req.prompt_id) not in done]
        ref = None
        paths = (
            target_paths(setup.target, req, paths=n_paths, temperature=args.temperature, seed=seed, **kw)
            if todo and n_paths
            else ()
        )
        for m in todo:
            if m == PLAIN:
                pt = acceptance_trace(
                    setup.target,
                    setup.draft,
                    req,
                    temperature=args.temperature,
                    top_k=key["top_k"],
                    paths=paths,
                    **kw,
                )
            else:
                ref = ref or target_reference(setup.target, req, **kw)
                pt = drafter_trace(
                    setup.target,
                    drafters[m],
                    req,
                    temperature=args.temperature,
                    reference=ref,
                    top_k=key["top_k"],
                    paths=paths,
                    **kw,
                )
            done[_trace_key(m, req.prompt_id)] = pt
        if todo:
            write_json_atomic(
                partial,
                {
                    "schema_version": PARTIAL_SCHEMA,
                    "key": key,
                    "traces": [{"method": k[0], **t.to_json()} for k, t in done.items()],
                },
            )
    tasks = {p.id: p.task for p in setup.prompts}
    entries, lines = [], []
    for n, reqs in setup.groups.items():
        for m in setup.methods:
            traces = [done[_trace_key(m, r.prompt_id)] for r in reqs]
            scenario = setup.scenario(n, args.scenario)
            entry = acceptance_entry(
                traces,
                method=m,
                scenario=scenario,
                images_per_prompt=n,
                task=",".join(sorted({tasks[r.prompt_id] for r in reqs if tasks[r.prompt_id]})),
                reference_gamma=args.reference_gamma,
                notes=f"teacher-forced on target greedy output, {args.max_new_tokens} new tokens, "
                f"beta at T={args.temperature}"
                + (
                    f"; accept_paths along {n_paths} sampled target paths per prompt (seed {seed})"
                    if n_paths
                    else ""
                ),
                **Method.parse(m).costs(n),
            )
            entries.append(entry)
            lines.append(
                f"{scenario}/{m}: {len(traces)} prompts, "
                f"{sum(len(t.trace.match) for t in traces)} positions, "
                f"match rate {_mean_match(traces):.3f}, tau(gamma={args.reference_gamma}) = {entry.tau:.3f}"
            )
    profile = (
        load_profile(str(out))
        if out.is_file()
        else Profile(provenance=provenance(setup, args), name=out.stem)
    )
    save_profile(profile.with_acceptance(entries), out)  # before printing: a closed stdout loses no traces
    partial.unlink(missing_ok=True)
    print("\n".join([*lines, f"-> {out}"]))
    return entries


def _trace_key(method: str, prompt_id: str) -> tuple[str, str]:
    return (method, prompt_id)


def _digest(prompts) -> str:
    return hashlib.sha256(json.dumps([p.to_json() for p in prompts], sort_keys=True).encode()).hexdigest()[
        :16
    ]


def partial_path(out: Path) -> Path:
    """Where the finished traces of an interrupted run of ``out`` are kept."""
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
        traces = _partial_traces(data, key, f"partial traces {str(path)!r}")
    except SpecsimError as err:
        warn(f"{err}; ignoring it and tracing every prompt again")
        return {}
    if data["key"] != key:  # valid, and another run's: hours of traces, not to be overwritten silently
        other = {k: v for k, v in data["key"].items() if key.get(k) != v}
        other |= {k: None for k in key if k not in data["key"]}
        raise SpecsimError(
            f"partial traces {str(path)!r} were traced with {show_value(other)} (expected "
            f"{show_value({k: key.get(k) for k in other})}; delete the file or pass --restart)"
        )
    return traces


def _partial_traces(data, key: dict, where: str) -> dict:
    """(method, prompt id) -> PromptTrace of a partial file's JSON ({} for another run's key)."""
    from calibrate.measure.acceptance_traces import PromptTrace

    if (
        not isinstance(data, dict)
        or type(data.get("schema_version")) is not int
        or data["schema_version"] != PARTIAL_SCHEMA
    ):
        raise SpecsimError(
            f"{where}: expected an object with schema_version {PARTIAL_SCHEMA} written by this tool"
        )
    if not isinstance(data.get("key"), dict):
        raise SpecsimError(f"{where}.key: expected an object, got {str(data.get('key'))[:60]!r}")
    if data["key"] != key:
        return {}  # another prompt set, model or setting: nothing to reuse (the caller refuses it)
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
