"""What ``specsim check --batch`` and ``--serve-rates`` refuse before a model loads (minutes saved on a bad
flag): γ outside the batched grid, a method or scenario without an acceptance entry, prompts without a greedy
trace, and prompts plus ``--max-new-tokens`` beyond the target's positions where its config is at hand."""

from __future__ import annotations

from specsim.errors import SpecsimError


def refuse_before_loading(
    args, profile, methods, gammas: list[int], batched=None, synthetic=None, *, traces: bool = True
) -> None:
    """SpecsimError for what the runs could not price, read off the flags, the prompt set and the profile
    (:func:`calibrate.measure.check_runs.entries_of` and the preflights repeat it after loading): γ in the
    ``batched`` grid, an entry per method and scenario group, a greedy trace per prompt (``traces``)."""
    from calibrate.measure.check_runs import entry_of, greedy_trace
    from calibrate.workload.run_setup import prompt_workload

    for g in gammas if batched is not None else ():
        batched.check_gamma(g)
    name, prompts, codes = prompt_workload(args, methods)
    if synthetic is not None:  # a schedule, not the profile's traces, decides the accepts
        return
    base, longest = args.scenario or name, 0
    for prompt in prompts:
        n = len(prompt.images)
        for m in codes:
            entry = entry_of(profile, m, base if n == 0 else f"{base}-{n}img")
            found = [t for t in entry.traces if t.prompt_id == prompt.id and t.match is not None]
            if traces and not found:
                greedy_trace(entry, prompt.id)  # names the method, scenario and prompt
            longest = max([longest] + [t.prompt_tokens or 0 for t in found])
    limit = target_positions(args)
    if limit is not None and longest + args.max_new_tokens > limit:
        raise SpecsimError(
            f"--max-new-tokens: {longest} prompt tokens (the longest prompt's, in the profile's traces) "
            f"+ {args.max_new_tokens} = {longest + args.max_new_tokens} positions, but the target has at "
            f"most {limit} (max_position_embeddings)"
        )


def target_positions(args) -> int | None:
    """The target's max_position_embeddings when its config is at hand without loading weights (the zoo, a
    config JSON, a local folder); None otherwise."""
    import json
    from pathlib import Path

    from specsim.presets import pair

    spec = pair(args.preset)["target"] if args.preset else args.target
    if not spec:
        return None
    if spec.startswith("zoo:"):
        from calibrate.zoo import weights_dir

        spec = str(weights_dir(spec.split(":", 1)[1]))
    path = Path(spec) / "config.json" if Path(spec).is_dir() else Path(spec)
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the loader names what is wrong with it
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    limit = (text if isinstance(text, dict) else config).get("max_position_embeddings")
    return limit if isinstance(limit, int) and limit > 0 else None
