"""The latency plan sized to the workload's prompts: ``calibrate latency`` measures the contexts and
prompt lengths the pair's prompt set will run at (:func:`calibrate.measure.latency_plan.workload_plan`)."""

from __future__ import annotations

from calibrate.measure import latency_plan as L
from calibrate.workload.run_setup import prompt_lengths
from specsim.presets import pair


def latency_workload(args, target) -> tuple[dict, list[int] | None, str]:
    """Plan fields sized to the prompt set's token lengths (see
    :func:`calibrate.measure.latency_plan.workload_plan`), those lengths (tokens; None: no workload) and a
    line saying so (printed once the plan is accepted, so an error stays one line)."""
    # A text pair without its own prompt set is sized to the built-in reference set, as its acceptance is.
    fallback = None if target.kind == "vlm" else "reference"
    name = args.prompts or (
        None if args.no_workload or not args.preset else pair(args.preset).get("prompts", fallback)
    )
    if name is None:
        return {}, None, ""
    target_tokens, draft_tokens = prompt_lengths(name, target, allow_outside_images=args.allow_outside_images)
    gammas = args.gammas or L.LatencyPlan().gammas
    line = (
        f"workload {name}: prompts of {min(target_tokens)}..{max(target_tokens)} tokens (draft contexts from "
        f"{min(draft_tokens)}), {args.max_new_tokens} new tokens"
    )
    sized = L.workload_plan(target_tokens, draft_tokens, args.max_new_tokens, gammas)
    return sized, list(target_tokens), line
