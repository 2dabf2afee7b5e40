"""An engine's acceptance as a profile entry: histogram or τ at K, provenance (engine, version, model,
window).

vLLM counters become ``accepted_histogram`` at γ = K (no separate τ), so
:func:`specsim.predict.tau_at_gamma.tau_with_source` gives τ(k) for every k ≤ K exactly and flags k > K as an
i.i.d. extrapolation. SGLang's accept length
becomes ``tau`` at γ = K, so only K itself is exact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from specsim.engines import sglang, vllm
from specsim.errors import SpecsimError
from specsim.profile_format import MethodAcceptance, Profile, Provenance
from specsim.profiles import load_profile, save_profile

NOT_REPORTED = "not reported by the engine"


@dataclass(frozen=True)
class EngineImport:
    """What one import read: engine, model, K, histogram (vLLM) or τ at K (SGLang), files, window, facts."""

    engine: str  # "vLLM" | "SGLang"
    model: str
    gamma: int
    accepted_histogram: tuple[int, ...] | None = None
    tau: float | None = None
    files: tuple[str, ...] = ()
    window: str = ""
    facts: tuple[str, ...] = ()

    def entry(
        self,
        *,
        method: str,
        scenario: str,
        images_per_prompt: int = 0,
        engine_version: str = "unknown",
        draft: str | None = None,
        device: str | None = None,
    ) -> MethodAcceptance:
        """The profile acceptance entry, its own provenance naming engine, version, model and window."""
        return MethodAcceptance(
            method=method,
            scenario=scenario,
            images_per_prompt=images_per_prompt,
            gamma=self.gamma,
            tau=self.tau,
            accepted_histogram=self.accepted_histogram,
            notes="; ".join(self.facts),
            provenance=self.provenance(engine_version, draft, device),
        )

    def provenance(self, engine_version: str, draft: str | None, device: str | None) -> Provenance:
        return Provenance(
            target=self.model or "(unlabelled model)",
            draft=draft or NOT_REPORTED,
            device=device or NOT_REPORTED,
            dtype=NOT_REPORTED,
            date=self.window,
            source="measured",
            software={self.engine.lower(): engine_version},
            weights="real",
            notes=f"imported from {self.engine} {engine_version} speculative-decoding metrics of model "
            f"{self.model or '(unlabelled)'!r}; window {self.window}; files {', '.join(self.files)}",
        )


def _stamp(path: str | Path) -> str:
    return datetime.fromtimestamp(os.stat(path).st_mtime, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_window(paths: list[str | Path]) -> str:
    """'<t0> .. <t1> (file modification times, UTC)' for two scrapes, 'server start .. <t>' for one."""
    stamps = [_stamp(p) for p in paths]
    if len(stamps) == 2:
        return f"{stamps[0]} .. {stamps[1]} (scrape file modification times, UTC)"
    return f"server start .. {stamps[0]} (one scrape: counters since start; file modification time, UTC)"


def import_vllm(
    paths: list[str | Path],
    *,
    model: str | None = None,
    num_speculative_tokens: int | None = None,
    window: str | None = None,
) -> EngineImport:
    """vLLM ``/metrics`` scrapes (one, or two for their difference) or ``LLM.get_metrics()`` JSON."""
    counters, chosen = vllm.read_counters(paths, model=model, num_speculative_tokens=num_speculative_tokens)
    facts = [
        f"vLLM counters: {counters.drafts} drafts, {counters.draft_tokens} draft tokens, {counters.accepted} "
        f"accepted (K = {counters.k}); mean acceptance length {counters.mean_acceptance_length:.4f} "
        f"(bonus included), acceptance rate {counters.acceptance_rate:.4f}"
    ]
    if counters.full_drafts_fraction < 1.0:
        facts.append(
            f"drafts proposed {counters.full_drafts_fraction:.1%} of K x drafts tokens (some drafts were "
            "shorter than K, e.g. n-gram misses or the end of a request); a_i is per draft as proposed"
        )
    return EngineImport(
        "vLLM",
        chosen,
        counters.k,
        accepted_histogram=counters.histogram(),
        files=tuple(str(p) for p in paths),
        window=window or file_window(paths),
        facts=tuple(facts),
    )


def import_sglang(
    path: str | Path, *, num_steps: int, model: str | None = None, window: str | None = None
) -> EngineImport:
    """SGLang: the ``sglang:spec_accept_length`` gauge, or a JSONL of ``/generate`` responses."""
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise SpecsimError(
            f"--num-steps: expected the server's --speculative-num-steps (an integer >= 1), got {num_steps!r}"
        )
    flag = (
        f"tau only at the server's draft length (--speculative-num-steps {num_steps}, chain drafting "
        "--speculative-eagle-topk 1 assumed); other gamma are i.i.d. extrapolations"
    )
    if sglang.is_responses_file(path):  # responses carry no model name: --model only names it
        tau, requests, steps = sglang.tau_from_responses(path, num_steps)
        facts = (
            f"SGLang responses: {requests} requests, {steps} verify steps; accept length "
            f"sum(completion_tokens - 1)/sum(spec_verify_ct) = {tau:.4f} (the prefill's token off)",
            flag,
        )
        return EngineImport(
            "SGLang",
            model or "",
            num_steps,
            tau=tau,
            files=(str(path),),
            window=window or f"the {requests} requests in {Path(path).name}",
            facts=facts,
        )
    tau, chosen = sglang.tau_from_gauge(path, num_steps, model=model)
    facts = (
        f"SGLang gauge {sglang.ACCEPT_LENGTH} = {tau:.4f} "
        "(mean over the scheduler's latest logging interval)",
        flag,
    )
    return EngineImport(
        "SGLang",
        chosen,
        num_steps,
        tau=tau,
        files=(str(path),),
        window=window
        or f"the scheduler's latest logging interval before {_stamp(path)} (file modification time, UTC)",
        facts=facts,
    )


def add_to_profile(entry: MethodAcceptance, out: str | Path) -> tuple[Profile, bool, MethodAcceptance | None]:
    """(profile written to ``out``, created?, the entry it replaced): ``entry`` added to the profile at
    ``out``, or a new one. A new profile carries the entry's provenance and no latency; an existing one
    keeps its own and any entry of the same (method, scenario) is replaced. Written atomically."""
    out = Path(out)
    if out.suffix != ".json":
        raise SpecsimError(f"--out: expected a path ending in .json, got {str(out)!r}")
    created = not out.exists()
    if created:
        profile = Profile(
            provenance=entry.provenance,
            acceptance=(entry,),
            name=out.stem,
            description=f"acceptance imported from a serving engine ({entry.provenance.notes[:80]})",
        )
    replaced = None
    if not created:
        before = load_profile(str(out))
        replaced = next(
            (e for e in before.acceptance if (e.method, e.scenario) == (entry.method, entry.scenario)), None
        )
        profile = before.with_acceptance([entry])
    save_profile(profile, out)
    return profile, created, replaced
