"""SGLang speculative decoding -> τ at the server's draft length (the only γ SGLang's numbers speak for).

Two sources, both bonus-included accept lengths per verify step (= specsim's τ): the gauge
``sglang:spec_accept_length`` on ``/metrics`` (the latest logging interval only: the scheduler's accepted
tokens plus one per request, over its verify steps), and native ``/generate`` responses (JSON lines), taken as
Σ (completion_tokens − 1) / Σ spec_verify_ct, the prefill's first token taken off as the gauge leaves it out.
τ is known at K = ``--speculative-num-steps`` only (a chain); every other γ is an i.i.d. extrapolation.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from pathlib import Path

from specsim.engines.metric_samples import (
    check_unique,
    models_of,
    of_model,
    parse_exposition,
    pick_model,
    read_text,
)
from specsim.errors import SpecsimError
from specsim.jsonio import parse_json

ACCEPT_LENGTH = "sglang:spec_accept_length"


def _check_tau(tau: float, num_steps: int, where: str) -> float:
    if tau == 0:
        raise SpecsimError(
            f"{where}: {ACCEPT_LENGTH} is 0: no speculative decoding in the last logging interval "
            "(scrape while the server decodes with speculative decoding on)"
        )
    if not 1.0 <= tau <= num_steps + 1 + 1e-9:  # NaN fails here too
        raise SpecsimError(
            f"{where}: accept length {tau:g} is outside 1..num_steps+1 = 1..{num_steps + 1} "
            "(is --num-steps the server's --speculative-num-steps?)"
        )
    return float(tau)


def tau_from_gauge(path: str | Path, num_steps: int, *, model: str | None = None) -> tuple[float, str]:
    """(τ at K = num_steps, model name) from a ``/metrics`` scrape."""
    where = f"metrics file {str(path)!r}"
    samples = parse_exposition(read_text(path, "metrics file"), where)
    models = models_of(samples, (ACCEPT_LENGTH,))
    if not models:
        raise SpecsimError(
            f"{where}: no {ACCEPT_LENGTH} gauge (start SGLang with --enable-metrics and "
            "speculative decoding on)"
        )
    chosen = pick_model(models, model, where)
    found = of_model(samples, ACCEPT_LENGTH, chosen)
    check_unique(found, where)  # the same series twice (two scrapes concatenated?), as for vLLM's counters
    values = sorted({s.value for s in found})
    if len(values) > 1:  # one sample per scheduler (tp/dp rank); they log the same batch statistics
        raise SpecsimError(
            f"{where}: {ACCEPT_LENGTH} has several different values for model {chosen!r} "
            f"({', '.join(f'{v:g}' for v in values)}); keep one scheduler's sample"
        )
    return _check_tau(values[0], num_steps, where), chosen


def _response_counts(obj, where: str) -> tuple[int, int, str]:
    """(completion_tokens, spec_verify_ct, request label) of one ``/generate`` response line."""
    meta = obj.get("meta_info") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        raise SpecsimError(f"{where}: expected an object with 'meta_info' (SGLang /generate response)")
    for key in ("completion_tokens", "spec_verify_ct"):
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SpecsimError(
                f"{where}: meta_info.{key}: expected an integer >= 0, got {v!r} "
                "(was the server started with speculative decoding?)"
            )
    rid = meta.get("id")
    label = f" (request {rid[:60]!r})" if isinstance(rid, str) else ""
    return meta["completion_tokens"], meta["spec_verify_ct"], label


def _check_request(tokens: int, steps: int, num_steps: int, where: str) -> None:
    """SpecsimError unless one request's numbers fit K = num_steps: steps + 1 <= tokens <= (K+1)·steps + 1
    (or no token and no step). Each verify step emits 1..K+1 tokens and the first token comes from the
    prefill, with no verify step; a line outside would be folded into τ as if decoded at K."""
    most = (num_steps + 1) * steps + 1
    if tokens < (steps + 1 if steps else 0):
        raise SpecsimError(
            f"{where}: meta_info.completion_tokens = {tokens} with spec_verify_ct = {steps}: expected "
            f"at least {steps + 1} tokens (the prefill's first, and at least one from each verify step)"
        )
    if tokens > most:
        raise SpecsimError(
            f"{where}: meta_info.completion_tokens = {tokens} with spec_verify_ct = {steps}: expected at "
            f"most {most} = ({num_steps} + 1) x {steps} + 1 (each verify step emits at most num_steps + 1 "
            "tokens, the first token comes from the prefill; is --num-steps the server's "
            "--speculative-num-steps?)"
        )


def tau_from_responses(path: str | Path, num_steps: int) -> tuple[float, int, int]:
    """(τ at K, requests, verify steps) from a JSONL of ``/generate`` responses with ``meta_info``."""
    where = f"responses file {str(path)!r}"
    rows = []  # (line number, request label, completion tokens, verify steps)
    for n, line in enumerate(read_text(path, "responses file").splitlines(), start=1):
        if line.strip():
            tokens, steps, label = _response_counts(
                parse_json(line, f"{where} line {n}"), f"{where} line {n}"
            )
            rows.append((n, label, tokens, steps))
    if not rows:
        raise SpecsimError(f"{where}: no responses")
    steps = sum(r[3] for r in rows)
    if steps == 0:  # before the per-line check: every line without a verify step means SD was off
        raise SpecsimError(
            f"{where}: zero verify steps (meta_info.spec_verify_ct is 0 in every response): "
            "no speculative decoding happened"
        )
    for n, label, request_tokens, request_steps in rows:
        _check_request(request_tokens, request_steps, num_steps, f"{where} line {n}{label}")
    decoded = sum(max(r[2] - 1, 0) for r in rows)  # each request's first token came from its prefill
    return _check_tau(decoded / steps, num_steps, where), len(rows), steps


def is_responses_file(path: str | Path) -> bool:
    """True for a JSONL of responses (first non-blank character '{'), False for Prometheus text;
    SpecsimError for a blank file (neither)."""
    text = read_text(path, "SGLang file").lstrip()
    if not text:
        raise SpecsimError(
            f"SGLang file {str(path)!r}: empty (expected a /metrics scrape or /generate responses)"
        )
    return text.startswith("{")
