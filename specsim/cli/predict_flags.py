"""Flags of ``specsim predict`` and ``sweep`` that a run would not read: refused, one line each, not
ignored."""

from __future__ import annotations

from specsim.errors import SpecsimError
from specsim.hardware.measured_pair import MeasuredPair
from specsim.hardware.model import check_block_positions
from specsim.profile_format import Profile


def refuse_unpriced_flags(args, profile: Profile) -> None:
    """A profile that publishes γ·c + v at one γ walks no requests: the flags that shape a walk would
    change nothing, so they are refused, not ignored."""
    ratio = profile.latency.published_ratio
    if ratio is None:
        return
    for flag, value in (
        ("--context-tokens", args.context_tokens),
        ("--max-new-tokens", getattr(args, "max_new_tokens", None)),
        ("--new-tokens", getattr(args, "new_tokens", None)),
        ("--tree", ",".join(getattr(args, "tree", None) or []) or None),  # trees and policies walk requests
        ("--policy", ",".join(getattr(args, "policy", None) or []) or None),
        ("--best-tree", getattr(args, "best_tree", False) or None),
    ):
        if value is not None:
            shown = "" if value is True else f" {value:g}" if isinstance(value, float) else f" {value}"
            raise SpecsimError(
                f"{flag}{shown}: profile {profile.name!r} gives gamma*c+v only as published at "
                f"gamma={ratio.gamma} (no latency grid to walk requests on); drop {flag}, or use a "
                "calibrated profile (`specsim profiles`)"
            )


def refuse_unread_flags(args, drafts: list) -> None:
    """--max-new-tokens caps the traced requests a walk replays; --new-tokens prices requests of its own
    length instead, so beside it the cap reaches only a --tree/--policy/--best-tree comparison."""
    if args.new_tokens is not None and args.textbook:  # the textbook prices a decode block, no request
        raise SpecsimError(
            "--new-tokens: prices whole requests on the profile's measured latency, which --textbook "
            "replaces (v = 1, i.i.d. alpha, no prefill); give one"
        )
    if args.new_tokens is not None and args.max_new_tokens is not None and not (drafts or args.best_tree):
        raise SpecsimError(
            "--max-new-tokens: caps the traced requests, and --new-tokens prices requests of its own length "
            "instead; give one (the cap applies beside it to a --tree/--policy/--best-tree comparison)"
        )


def refuse_past_window(profile: Profile, context_tokens, gamma: int, new_tokens: int | None = None) -> None:
    """--context-tokens (plus --new-tokens or --max-new-tokens where given) must leave room for a γ block
    in the profile's target's window, where its config states one (extrapolating past it prices a request
    no run can have)."""
    specs = None if context_tokens is None else MeasuredPair.of(profile).specs()
    if specs is not None:
        context, new = int(context_tokens), new_tokens or 0
        check_block_positions(
            specs[0], context, gamma, "--context-tokens", gamma_flag="--gamma", new_tokens=new
        )
