"""``specsim check --runtime llama.cpp``: llama.cpp's own speculative decoding against its target-only
decoding, one request at a time, in rounds.

One llama-server per setting, all started at once; a round sends every prompt to every setting, until each
row's decode-phase speedup has a 95 % half-width within ``halfwidth`` (or a round or time limit). Finished
requests go to a partial file a rerun resumes from, kept as the raw runs when the check is done.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.llama_cpp.block_terms import RunSample, remeasured_model
from calibrate.llama_cpp.server import Completion, LlamaServer, ServerConfig, timed_completion
from calibrate.llama_cpp.traces import TracedPrompt
from calibrate.run.timing import out_of_time
from specsim.check.comparison import ratio_halfwidth
from specsim.check.engine_rows import EngineRun, engine_row
from specsim.draft_shapes.ngram_lookup import NgramSimple, parse_ngram
from specsim.errors import SpecsimError
from specsim.jsonio import parse_json, read_text, write_json_atomic

SCHEMA_VERSION = 1
BASE = "target-only"
HELD = "held-out "  # prefix of a setting's runs on held-out prompts (--remeasure)


@dataclass(frozen=True)
class Setting:
    """One server of the check: its label (``target-only``, ``draft:γ``, an n-gram kind's label) and
    configuration."""

    label: str
    config: ServerConfig
    schema_version: int = SCHEMA_VERSION


def label_gamma(label: str) -> int:
    """The draft model's γ of a setting labelled ``target-only`` (0) or ``draft:γ``."""
    return 0 if label == BASE else int(label.split(":")[1])


@dataclass(frozen=True)
class CheckRuns:
    """Every finished request: ``runs[label][prompt_id]`` is a list of :class:`Completion` (one per round),
    the rounds completed, the seconds spent (this and earlier slices) and whether the check is complete
    (else a rerun goes on from the partial file)."""

    runs: dict
    rounds: int
    seconds: float
    finished: bool = True
    schema_version: int = SCHEMA_VERSION

    def decode_ms(self, label: str, prompt_ids) -> np.ndarray:
        """Decode-phase ms [prompt, round] of ``label`` over the complete rounds."""
        return np.array(
            [[c.predicted_ms for c in self.runs[label][p][: self.rounds]] for p in prompt_ids], dtype=float
        )

    def halfwidth(self, label: str, prompt_ids) -> float:
        """The relative 95 % half-width of ``label``'s decode-phase speedup over target-only."""
        return ratio_halfwidth(self.decode_ms(BASE, prompt_ids), self.decode_ms(label, prompt_ids))


def _load_partial(path: Path, key: dict) -> tuple[dict, float]:
    """(runs, seconds) of an earlier slice of the same check, else empty."""
    if not path.exists():
        return {}, 0.0
    d = parse_json(read_text(path, "check partial"), str(path))
    if d.get("key") != key:
        raise SpecsimError(f"{path}: a partial llama.cpp check of other settings (delete it or use them)")
    runs = {
        label: {p: [Completion(**c) for c in cs] for p, cs in per.items()} for label, per in d["runs"].items()
    }
    return runs, float(d["seconds"])


def _save_partial(path: Path, key: dict, runs: dict, seconds: float) -> None:
    data = {
        "key": key,
        "seconds": seconds,
        "runs": {label: {p: [_plain(c) for c in cs] for p, cs in per.items()} for label, per in runs.items()},
    }
    write_json_atomic(path, data)


def keep_runs(partial: Path) -> Path:
    """Rename a finished check's partial file to ``….runs.json`` (its raw runs, kept for analysis such as
    ``bench/llama_serve_steps.py``; a rerun starts afresh) and return the new path."""
    kept = partial.with_name(partial.name.replace(".partial.json", ".runs.json"))
    if partial.exists():
        partial.replace(kept)
    return kept


def _plain(c: Completion) -> dict:
    d = asdict(c)
    d["tokens"] = list(d["tokens"])
    return d


def check_settings(target: str, draft: str, threads: int, gammas, ngram: NgramSimple | None) -> list[Setting]:
    """Target-only, the draft model at each γ, and the n-gram kind (when given)."""
    out = [Setting(BASE, ServerConfig(target, threads))]
    out += [Setting(f"draft:{g}", ServerConfig.draft_model(target, threads, draft, g)) for g in gammas]
    if ngram is not None:
        config = ServerConfig(
            target, threads, spec_type="ngram-simple", ngram_n=ngram.size_n, ngram_m=ngram.size_m
        )
        out.append(Setting(ngram.label, config))
    return out


def run_llama_check(
    llama: LlamaCpp,
    settings: list[Setting],
    prompts: list[TracedPrompt],
    *,
    new_tokens: int,
    threads: int,
    partial: Path,
    halfwidth: float,
    min_rounds: int,
    max_rounds: int,
    max_seconds: float | None,
    niceness: int = 0,
    progress=None,
    requests: dict | None = None,
    held_out: tuple[TracedPrompt, ...] = (),
    held_tokens: int = 64,
) -> CheckRuns:
    """Run (or resume) the check of the module docstring. ``new_tokens``: one count, or one per prompt id;
    ``requests``: each prompt as sent (token ids, or a multimodal prompt), instead of its text in the
    model's chat template; ``held_out``: before each round, one of these prompts (in turn) runs
    ``held_tokens`` tokens target-only, at each draft-model γ and target-only again (``--remeasure``:
    :func:`held_out_runs` re-price the step and the blocks from them)."""
    if settings[0].label != BASE:
        raise SpecsimError("llama.cpp check: the first setting must be target-only")
    ids = sorted(p.prompt_id for p in prompts)
    held_ids = [p.prompt_id for p in held_out]
    if set(held_ids) & set(ids):
        raise SpecsimError(f"llama.cpp check: held-out prompts {held_ids} overlap the checked ones {ids}")
    key = {"settings": [s.label for s in settings], "prompts": ids, "new_tokens": new_tokens}
    sequence = [BASE] + [s.label for s in settings if s.label.startswith("draft:")] + [BASE]
    if held_ids:
        key |= {"held_out": held_ids, "held_tokens": held_tokens}
    runs, seconds = _load_partial(partial, key)
    for s in settings:
        runs.setdefault(s.label, {p: [] for p in ids})
    for label in sequence if held_ids else ():
        runs.setdefault(HELD + label, {p: [] for p in held_ids})

    def rounds_done() -> int:
        return min(len(runs[s.label][p]) for s in settings for p in ids)

    def done() -> bool:
        r = rounds_done()
        if r >= max_rounds:
            return True
        view = CheckRuns(runs, r, seconds)
        precise = all(view.halfwidth(s.label, ids) <= halfwidth for s in settings[1:])
        return r >= max(min_rounds, 2) and precise

    t0 = time.perf_counter()
    configs = {s.label: s.config for s in settings}
    with contextlib.ExitStack() as stack:
        servers = {BASE: stack.enter_context(LlamaServer(llama, settings[0].config, niceness=niceness))}

        def server(label: str) -> LlamaServer:
            if label not in servers:
                servers[label] = stack.enter_context(LlamaServer(llama, configs[label], niceness=niceness))
            return servers[label]

        tokens = requests or {p.prompt_id: servers[BASE].tokenize_chat(p.text) for p in prompts}
        held = {p.prompt_id: servers[BASE].tokenize_chat(p.text) for p in held_out}
        per_prompt = new_tokens if isinstance(new_tokens, dict) else dict.fromkeys(ids, new_tokens)
        while not done():
            if out_of_time(t0, max_seconds, rounds_done(), min_rounds):
                break
            r = rounds_done()
            if held_ids:  # the round's held-out prompt, each run once (a resumed round skips those done)
                p, k = held_ids[r % len(held_ids)], r // len(held_ids)
                for i, label in enumerate(sequence):
                    wanted = k * sequence.count(label) + sequence[: i + 1].count(label)
                    if len(runs[HELD + label][p]) >= wanted:
                        continue
                    run = timed_completion(server(label), held[p], held_tokens, threads)
                    runs[HELD + label][p].append(run)
                    _save_partial(partial, key, runs, seconds + time.perf_counter() - t0)
            for p in ids:
                for s in settings:
                    if len(runs[s.label][p]) > r:
                        continue
                    run = timed_completion(server(s.label), tokens[p], per_prompt[p], threads)
                    runs[s.label][p].append(run)
                    elapsed = seconds + time.perf_counter() - t0
                    _save_partial(partial, key, runs, elapsed)
                    if progress is not None:
                        progress(r, p, s.label)
                if out_of_time(t0, max_seconds, r, min_rounds):  # round r unfinished: r rounds done
                    break
    return CheckRuns(runs, rounds_done(), seconds + time.perf_counter() - t0, done())


def held_out_runs(runs: CheckRuns) -> list[RunSample]:
    """The held-out prompts' runs (``run_llama_check``'s ``held_out``) as the calibration's real runs: γ 0
    target-only, else the draft model's γ."""
    out = []
    for label, per in runs.runs.items():
        if label.startswith(HELD):
            gamma = label_gamma(label[len(HELD) :])
            for cs in per.values():
                out += [
                    RunSample(gamma, c.prompt_n, c.predicted_n - 1, c.draft_n, c.draft_accepted,
                              c.predicted_ms, c.cores_foreign)
                    for c in cs
                ]  # fmt: skip
    return out


def remeasured_profile(profile, runs: CheckRuns):
    """(``profile`` with the step and the draft model's blocks priced from the held-out runs between the
    check's rounds, :func:`calibrate.llama_cpp.block_terms.remeasured_model`, said in its notes; the note)."""
    model, terms = remeasured_model(profile.latency.cost_model, held_out_runs(runs))
    held = sorted({p for label, per in runs.runs.items() if label.startswith(HELD) for p in per})
    per_gamma = ", ".join(f"{g}: {ms:.1f}" for g, ms in terms.per_gamma_ms)
    line = (
        f"{terms.per_step_ms:.1f} ms per target-only step ({terms.real_steps} runs), per gamma (median ms "
        f"per block, {terms.real_runs} real-acceptance runs) {per_gamma}, on held-out prompts "
        f"{', '.join(held)}"
    )
    prov = profile.latency.provenance
    notes = f"{prov.notes}; re-measured between the check's {runs.rounds} rounds (check --remeasure): {line}"
    latency = replace(profile.latency, cost_model=model, provenance=replace(prov, notes=notes))
    return replace(profile, latency=latency), line


def llama_rows(profile, entry, runs: CheckRuns, settings: list[Setting], reference_gamma: int) -> list:
    """One :class:`specsim.profile_format.CheckRow` per SD setting over the complete rounds
    (:func:`specsim.check.engine_rows.engine_row`)."""
    if runs.rounds < 1:
        return []

    def engine(label):
        return {
            p: [
                EngineRun(p, c.prompt_ms, c.predicted_ms, c.predicted_n, c.draft_n, c.draft_accepted)
                for c in cs[: runs.rounds]
            ]
            for p, cs in runs.runs[label].items()
        }

    base = engine(BASE)
    rows = []
    for s in settings[1:]:
        draft = parse_ngram(s.label) if s.label.startswith("ngram") else label_gamma(s.label)
        rows.append(
            engine_row(
                profile,
                entry,
                draft,
                base,
                engine(s.label),
                runtime="llama.cpp",
                reference_gamma=reference_gamma,
            )
        )
    return rows
