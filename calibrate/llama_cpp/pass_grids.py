"""The profile's pass grids measured by ``llama-bench``: every forward llama.cpp's speculative decoding runs.

Per model, three ``llama-bench`` runs (``-t`` threads, ``-r`` repetitions, JSONL):

- generation tests (``-n 4``) at each cache depth: a 1-row step → ``target_decode``, ``draft_first`` and
  ``draft_next`` (llama.cpp's draft feeds one row per step: its first is the target's last token);
- prompt tests of ``rows`` = 2..γ_max+1 at each depth: one forward over the rows → ``target_verify`` and
  ``draft_catchup``, the draft's pass over the rows the target just verified (llama.cpp re-runs them
  through the draft after each verification, ``TAG_SPEC_AVOID_DRAFT_REEVAL`` in its server);
- prompt tests at depth 0 → ``target_prefill`` / ``draft_prefill``.

``llama-bench`` keeps logits of a prompt test's last row only; llama.cpp's verification keeps every row's.
That difference is work per drafted row, and the per-block terms (:mod:`calibrate.llama_cpp.block_terms`)
measure it inside llama.cpp's own loop.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from dataclasses import dataclass

from calibrate.llama_cpp.bench_output import BenchRecord, parse_bench_jsonl
from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.run.timing import summarize
from specsim.errors import SpecsimError
from specsim.profile.cost_grid import CostGrid, make_grid

SCHEMA_VERSION = 1
GEN_FORWARDS = 4  # 1-row forwards per generation sample


@dataclass(frozen=True)
class GridPlan:
    """What to time: cache depths, the largest γ (rows 2..γ+1), prompt lengths for prefill, threads and
    repetitions per test."""

    depths_tokens: tuple[int, ...]
    max_gamma: int
    prefill_tokens: tuple[int, ...]
    threads: int
    repetitions: int = 5
    niceness: int = 0
    schema_version: int = SCHEMA_VERSION

    def runs(self) -> list[list[str]]:
        """The ``llama-bench`` argument lists (the model excluded): generation, verification-shaped prompt
        tests, prefills."""
        common = ["-t", str(self.threads), "-r", str(self.repetitions), "-o", "jsonl"]
        depths = ",".join(str(d) for d in self.depths_tokens)
        rows = ",".join(str(r) for r in range(2, self.max_gamma + 2))
        prefill = ",".join(str(p) for p in self.prefill_tokens)
        return [
            ["-p", "0", "-n", str(GEN_FORWARDS), "-d", depths, *common],
            ["-p", rows, "-n", "0", "-d", depths, *common],
            ["-p", prefill, "-n", "0", "-d", "0", *common],
        ]


def run_bench(llama: LlamaCpp, model: str, args: list[str], niceness: int = 0) -> str:
    """One ``llama-bench`` run's stdout (JSONL); SpecsimError with its last error line when it fails."""
    cmd = [llama.path("llama-bench"), "-m", model, *args]
    if niceness:
        cmd = ["nice", "-n", str(niceness), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SpecsimError(f"llama-bench failed on {model}: {tail}")
    return proc.stdout


def measure_model(llama: LlamaCpp, model: str, plan: GridPlan) -> list[BenchRecord]:
    """Every test of ``plan`` on one GGUF."""
    return [
        r for args in plan.runs() for r in parse_bench_jsonl(run_bench(llama, model, args, plan.niceness))
    ]


def _grid(records: list[BenchRecord], rows: tuple[int, ...], prefill: bool = False) -> CostGrid:
    """A grid of the records at ``rows`` (prompt tests at depth 0 when ``prefill``: rows along the grid's
    rows, context 0); medians and 95% half-widths of the repetitions."""
    cells: dict[tuple[int, float], list[float]] = defaultdict(list)
    for r in records:
        if r.rows in rows and (r.depth_tokens == 0) == prefill:
            cells[(r.rows, 0.0 if prefill else r.context_tokens)].extend(r.pass_ms)
    contexts = sorted({c for _, c in cells})
    missing = [(r, c) for r in rows for c in contexts if (r, c) not in cells]
    if not cells or missing:
        raise SpecsimError(f"llama-bench: no timing of rows x context {missing or rows}")
    stats = [[summarize(cells[(r, c)]) for c in contexts] for r in rows]
    return make_grid(
        rows,
        contexts,
        (1,),
        [[[s.median_ms] for s in row] for row in stats],
        [[[s.halfwidth_ms] for s in row] for row in stats],
        [[[s.n] for s in row] for row in stats],
    )


def pass_grids(target: list[BenchRecord], draft: list[BenchRecord], plan: GridPlan) -> dict[str, CostGrid]:
    """The cost model's grids from both models' tests (module docstring), by field name."""
    rows = tuple(range(2, plan.max_gamma + 2))
    prefill = tuple(sorted(plan.prefill_tokens))
    step = _grid(draft, (1,))
    return {
        "target_decode": _grid(target, (1,)),
        "target_verify": _grid(target, rows),
        "draft_first": step,
        "draft_next": step,
        "draft_catchup": _grid(draft, rows),
        "target_prefill": _grid(target, prefill, prefill=True),
        "draft_prefill": _grid(draft, prefill, prefill=True),
    }
