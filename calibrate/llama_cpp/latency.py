"""``specsim calibrate latency --engine llama.cpp``: a profile's latency measured through llama.cpp itself.

Two stages: the passes (:mod:`calibrate.llama_cpp.pass_grids`: ``llama-bench`` fills the cost model's grids,
the draft's catch-up included), and the work around them (:mod:`calibrate.llama_cpp.block_terms`: the
residuals of ``llama-server``'s synthetic-acceptance blocks over the grids' forwards, fitted per block, per
draft, per emitted token and per target-only step; each γ's block from real-acceptance runs on held-out
prompts where the plan names them). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from calibrate.llama_cpp import block_terms as bt
from calibrate.llama_cpp.bench_output import BatchedRecord, BenchRecord
from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.llama_cpp.pass_grids import GridPlan, measure_model, measure_verify, pass_grids
from calibrate.llama_cpp.server import LlamaServer, ServerConfig
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.ngram_lookup import NgramSimple
from specsim.errors import SpecsimError
from specsim.hardware.host import cpu_device_name
from specsim.jsonio import parse_json, read_text, write_json_atomic
from specsim.profile_format import LatencySection, Provenance
from specsim.profile_format.cost_model import CostModel

SCHEMA_VERSION = 1
# n-gram calibration: a prompt that repeats, so the lookup always finds a draft
CYCLE_PROMPT = "Count from 1 to 9 again and again, separated by spaces: " + "1 2 3 4 5 6 7 8 9 " * 8


@dataclass(frozen=True)
class LatencyPlan:
    """The pass grids' plan, the γ of the synthetic block runs, blocks per run, rounds, an optional n-gram
    kind to time, and the held-out prompts (ids) whose real-acceptance runs of ``real_tokens`` tokens price
    each γ."""

    grid: GridPlan
    block_gammas: tuple[int, ...]
    blocks_per_run: int = 8
    rounds: int = 3
    ngram: NgramSimple | None = None
    held_out: tuple[str, ...] = ()
    real_tokens: int = 64
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class LatencyResult:
    """The latency section, the block fits (the lookup's None without an n-gram kind), seconds taken and the
    plan."""

    section: LatencySection
    terms: bt.BlockTerms
    lookup_terms: bt.BlockTerms | None
    seconds: dict
    plan: LatencyPlan
    schema_version: int = SCHEMA_VERSION


def _runs(gammas, blocks: int) -> list[tuple[int, int, int]]:
    """(γ, accepted, n_predict) of the synthetic runs: target-only, then 0 and γ accepted at each γ."""
    runs = [(0, 0, 1 + 2 * blocks)]
    for g in gammas:
        runs += [(g, 0, 1 + blocks + g), (g, g, 1 + blocks * (g + 1))]
    return runs


def _block_samples(llama, target, draft, plan: LatencyPlan, prompt_ids, niceness) -> list[bt.BlockSample]:
    runs = _runs(plan.block_gammas, plan.blocks_per_run)
    threads = plan.grid.threads
    with contextlib.ExitStack() as stack:
        servers = {}
        for g, a, _ in runs:
            config = (
                ServerConfig(target, threads)
                if g == 0
                else ServerConfig.draft_model(target, threads, draft, g, bt.synthetic_rates(g, a))
            )
            servers[(g, a)] = stack.enter_context(LlamaServer(llama, config, niceness=niceness))
        return bt.measure_runs(servers, prompt_ids, runs, plan.rounds)


def _real_runs(llama, target, draft, plan: LatencyPlan, prompts, niceness) -> list[bt.RunSample]:
    threads = plan.grid.threads
    configs = {0: ServerConfig(target, threads)}  # target-only: the step as the check runs it
    configs |= {g: ServerConfig.draft_model(target, threads, draft, g) for g in plan.block_gammas}
    with contextlib.ExitStack() as stack:
        servers = {
            g: stack.enter_context(LlamaServer(llama, c, niceness=niceness)) for g, c in configs.items()
        }
        return bt.measure_real_runs(servers, prompts, plan.real_tokens, plan.rounds, threads)


def _lookup_samples(llama, target, plan: LatencyPlan, niceness) -> tuple[list[bt.BlockSample], int]:
    kind, threads = plan.ngram, plan.grid.threads
    runs = [(kind.size_m, 0, 1 + plan.blocks_per_run + kind.size_m), (kind.size_m, kind.size_m, 1 + 40)]
    with contextlib.ExitStack() as stack:
        servers = {}
        for g, a, _ in runs:
            config = ServerConfig(
                target,
                threads,
                spec_type="ngram-simple",
                ngram_n=kind.size_n,
                ngram_m=kind.size_m,
                synth_rates=bt.synthetic_rates(g, a),
            )
            servers[(g, a)] = stack.enter_context(LlamaServer(llama, config, niceness=niceness))
        ids = servers[runs[0][:2]].post("/tokenize", {"content": CYCLE_PROMPT, "add_special": True})["tokens"]
        return bt.measure_runs(servers, ids, runs, plan.rounds, lookup=kind), len(ids)


def _model(grids: dict, terms: bt.BlockTerms | None, lookup: bt.BlockTerms | None, max_gamma: int, m: int):
    zero = bt.BlockTerms(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    terms = terms or zero
    model = CostModel(
        **{k: v for k, v in grids.items() if k != "draft_catchup"},
        overhead_ms_per_block=bt.overhead_grid(terms, range(1, max_gamma + 1)),
        overhead_ms_per_target_step=float(terms.per_step_ms),
        draft_catchup=grids["draft_catchup"],
        overhead_ms_per_token=max(terms.per_token_ms, 0.0),
        first_pass_drafts=False,
        lookup_overhead_ms_per_block=None if lookup is None else bt.overhead_grid(lookup, range(1, m + 1)),
        interpolation="context_tokens: piecewise linear (llama-bench depths), flagged linear extrapolation "
        "outside; rows exact or linear between measured values",
    )
    return bt.checked_calibration(model)


def fit_lookup(samples, cost, per_token_ms: float) -> bt.BlockTerms:
    """The n-gram blocks' fit with the draft model's per-token term held (same sampling and tokens)."""
    blocks = [s for s in samples if s.gamma > 0 and s.drafts > 0]
    y = np.array([s.ms - bt.forward_ms(cost, s) - per_token_ms * s.emitted for s in blocks])
    (o0, og), rms = bt.line_ms(blocks, y)
    return bt.BlockTerms(o0, og, per_token_ms, 0.0, rms, len(blocks), 0)


def _stage(stages: Stages, name: str, run, kind):
    """A stage's records: from the partial file of an earlier slice, else run now and saved (refused for
    kept records, which a refit only reads)."""
    if name not in stages.done and stages.kept:
        raise SpecsimError(f"--refit: {stages.path} has no {name!r} stage (calibrate again)")
    if name not in stages.done:
        t0 = time.perf_counter()
        stages.done[name] = [asdict(r) for r in run()]
        stages.seconds[name] = time.perf_counter() - t0
        stages.save()
        print(f"llama.cpp latency: {name} in {stages.seconds[name]:.0f} s", file=sys.stderr)
    return [
        kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in r.items()}) for r in stages.done[name]
    ]


@dataclass
class Stages:
    """Finished stages' records, kept in a partial file next to the profile (a rerun resumes; the plan and
    models are the key)."""

    path: Path
    key: dict
    done: dict
    seconds: dict
    kept: bool = False  # a finished calibration's records (--refit): read, never run or written

    @classmethod
    def open(cls, path: Path, key: dict, kept: bool = False) -> Stages:
        if path.exists():
            d = parse_json(read_text(path, "latency records" if kept else "latency partial"), str(path))
            if d.get("key") == key:
                return cls(path, key, d["done"], d["seconds"], kept)
        if kept:
            why = "not found" if not path.exists() else "records of another plan, models or llama.cpp build"
            raise SpecsimError(f"--refit: {path}: {why} (the same command without --refit measures)")
        return cls(path, key, {}, {})

    def save(self) -> None:
        write_json_atomic(self.path, {"key": self.key, "done": self.done, "seconds": self.seconds})


def measure_latency(
    llama: LlamaCpp, target: str, draft: str, plan: LatencyPlan, prompt_ids, *, partial: Path, niceness=0,
    notes="", held_out=(), kept: bool = False,
) -> LatencyResult:  # fmt: skip
    """Both stages (module docstring) into a latency section, stage by stage (resumable from ``partial``;
    ``kept``: a finished calibration's records there, fitted again without timing anything); ``held_out``:
    the token ids of ``plan.held_out``'s prompts."""
    key = {"plan": repr(plan), "target": target, "draft": draft, "commit": llama.commit}
    st = Stages.open(partial, key, kept)
    t_recs = _stage(
        st, "llama-bench target", lambda: measure_model(llama, target, plan.grid, draft=False), BenchRecord
    )
    d_recs = _stage(
        st, "llama-bench draft", lambda: measure_model(llama, draft, plan.grid, draft=True), BenchRecord
    )
    verify = _stage(
        st, "llama-batched-bench verify", lambda: measure_verify(llama, target, plan.grid), BatchedRecord
    )
    grids = pass_grids(t_recs, d_recs, verify, plan.grid)
    m = plan.ngram.size_m if plan.ngram else 0
    cost = GridPassCost(_model(grids, None, None, plan.grid.max_gamma, m))
    blocks = _stage(st, "blocks", lambda: _block_samples(llama, target, draft, plan, prompt_ids, niceness),
                    bt.BlockSample)  # fmt: skip
    runs = ()
    if held_out:
        real = functools.partial(_real_runs, llama, target, draft, plan, held_out, niceness)
        runs = tuple(_stage(st, "real blocks", real, bt.RunSample))
    terms = bt.fit_block_terms(blocks, cost, runs)
    lookup = None
    if plan.ngram is not None:
        samples = _stage(st, "n-gram blocks", lambda: _lookup_samples(llama, target, plan, niceness)[0],
                         bt.BlockSample)  # fmt: skip
        lookup = fit_lookup(samples, GridPassCost(cost.model, drafter="lookup"), terms.per_token_ms)
    seconds = dict(st.seconds)
    model = _model(grids, terms, lookup, plan.grid.max_gamma, m)
    quant = t_recs[0].model_type
    provenance = Provenance(
        target=_stem(target),
        draft=_stem(draft),
        device=cpu_device_name(),
        dtype=f"gguf {quant}",
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        source="measured",
        software=llama.software() | {"python": platform.python_version()},
        threads=plan.grid.threads,
        notes="; ".join(x for x in (notes, fit_note(terms, lookup, plan.held_out)) if x),
    )
    section = LatencySection(cost_model=model, provenance=provenance)
    return LatencyResult(section, terms, lookup, seconds, plan)


def fit_note(terms: bt.BlockTerms, lookup: bt.BlockTerms | None, held_out: tuple[str, ...] = ()) -> str:
    """The block fits in one line for the provenance notes (``held_out``: the real runs' prompts)."""
    out = (
        f"llama-server per-block work outside the llama-bench forwards (synthetic acceptance, {terms.blocks} "
        f"blocks): {terms.per_block_ms:.1f} ms per block + {terms.per_draft_ms:.1f} ms per draft + "
        f"{terms.per_token_ms:.1f} ms per emitted token (residual RMS {terms.rms_ms:.1f} ms); "
        f"{terms.per_step_ms:.1f} ms per target-only step"
    )
    if terms.real_steps:
        out += (
            f" ({terms.real_steps} target-only runs on held-out prompts {', '.join(held_out)}, not streamed)"
        )
    if terms.per_gamma_ms:
        source = "synthetic blocks"
        if terms.real_runs:
            source = f"{terms.real_runs} real-acceptance runs on held-out prompts {', '.join(held_out)}"
        out += f"; priced per gamma (median ms per block, {source}): " + ", ".join(
            f"{g}: {ms:.1f}" for g, ms in terms.per_gamma_ms
        )
    if lookup is not None:
        out += (
            f"; n-gram blocks ({lookup.blocks}): {lookup.per_block_ms:.1f} ms + {lookup.per_draft_ms:.1f} ms "
            f"per draft (RMS {lookup.rms_ms:.1f} ms)"
        )
    return out


def _stem(path: str) -> str:
    name = str(path).rsplit("/", 1)[-1]
    return name[:-5] if name.endswith(".gguf") else name


def save_latency(out, section: LatencySection):
    """Write ``section`` into the profile at ``out`` (its acceptance and checks kept), or a new profile."""
    from dataclasses import replace
    from pathlib import Path

    from specsim.profile_format import Profile
    from specsim.profiles import load_profile, save_profile

    out = Path(out)
    if out.is_file():
        profile = replace(load_profile(str(out)), latency=section)
    else:
        desc = f"{section.provenance.target} / {section.provenance.draft} through llama.cpp"
        profile = Profile(provenance=section.provenance, latency=section, name=out.stem, description=desc)
    return save_profile(profile, out)


def save_traces(out, traces, scenario: str, command: str, target: str, draft: str):
    """Add the traces as method ``plain`` in ``scenario`` to the profile at ``out`` (a new profile
    without latency if there is none); (path, entry)."""
    from pathlib import Path

    from specsim.profile_format import MethodAcceptance, Profile
    from specsim.profiles import load_profile, save_profile

    entry = MethodAcceptance(
        method="plain",
        scenario=scenario,
        images_per_prompt=0,
        task="llama.cpp",
        traces=tuple(traces),
        target_prompt_tokens=float(np.mean([t.prompt_tokens for t in traces])),
        draft_prompt_tokens=float(np.mean([t.prompt_tokens for t in traces])),
        notes=f"greedy traces from llama.cpp's logits (target decodes, the draft names its argmax along it, "
        f"EOS ignored): {command}",
    )
    out = Path(out)
    if out.is_file():
        profile = load_profile(str(out))
    else:
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        provenance = Provenance(_stem(target), _stem(draft), cpu_device_name(), "gguf", date, "measured")
        profile = Profile(provenance=provenance, name=out.stem)
    return save_profile(profile.with_acceptance([entry]), out), entry


def summary_lines(result: LatencyResult, path) -> list[str]:
    """What was measured, in a few lines: Tp, Tq, Tv(γ), the catch-up pass, the block terms, seconds."""
    from specsim.costs.pass_cost import CATCHUP, DRAFT, TARGET

    model = result.section.cost_model
    cost, ctx = GridPassCost(model), float(result.plan.grid.depths_tokens[0])
    rows = range(2, model.max_gamma + 2)
    ms = lambda role, r, kind="step": float(cost.pass_ms(role, r, ctx, kind=kind).ms)  # noqa: E731
    spent = ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items())
    return [
        f"wrote {path} ({spent})",
        f"at context {ctx:g}: Tp {ms(TARGET, 1):.1f} ms, Tq {ms(DRAFT, 1):.1f} ms "
        f"(c = {ms(DRAFT, 1) / ms(TARGET, 1):.2f})",
        "Tv(gamma) ms: " + ", ".join(f"{r - 1}: {ms(TARGET, r):.1f}" for r in rows),
        "draft catch-up over gamma+1 rows ms: "
        + ", ".join(f"{r - 1}: {ms(DRAFT, r, CATCHUP):.1f}" for r in rows),
        fit_note(result.terms, result.lookup_terms, result.plan.held_out),
    ]


def add_batched(out, llama, target: str, draft: str, plan) -> tuple:
    """Measure llama-server's batched grids (:mod:`calibrate.llama_cpp.serve_grids`) into the llama.cpp
    profile at ``out``; (path, seconds)."""
    from dataclasses import replace

    from calibrate.llama_cpp.serve_grids import measure_batched
    from specsim.errors import SpecsimError
    from specsim.profiles import load_profile, save_profile

    profile = load_profile(str(out))
    model = profile.latency.forward_costs()
    if model.first_pass_drafts:
        raise SpecsimError(f"--out {out}: not a llama.cpp profile (run calibrate latency --engine llama.cpp)")
    t0 = time.perf_counter()
    batched = measure_batched(llama, target, draft, plan, GridPassCost(model))
    section = replace(profile.latency, cost_model=replace(model, batched=batched))
    return save_profile(replace(profile, latency=section), out), time.perf_counter() - t0
