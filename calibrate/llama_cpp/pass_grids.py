"""The profile's pass grids measured by ``llama-bench``: every forward llama.cpp's speculative decoding runs.

Per model, ``llama-bench`` generation tests (1-row steps → ``target_decode``, ``draft_first``, ``draft_next``)
and prompt tests (``draft_catchup`` over 2..γ_max+1 rows; ``target_prefill``/``draft_prefill`` at depth 0).
``target_verify`` comes from ``llama-batched-bench``, since a verification keeps every row's logits.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from dataclasses import dataclass

from calibrate.llama_cpp.bench_output import (
    BatchedRecord,
    BenchRecord,
    parse_batched_jsonl,
    parse_bench_jsonl,
)
from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.run.timing import summarize
from specsim.errors import SpecsimError
from specsim.profile_format.cost_grid import CostGrid, make_grid

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

    def runs(self, draft: bool) -> list[list[str]]:
        """The ``llama-bench`` argument lists (the model excluded): generation, the catch-up's prompt tests
        (``draft``), prefills."""
        common = ["-t", str(self.threads), "-r", str(self.repetitions), "-o", "jsonl"]
        depths = ",".join(str(d) for d in self.depths_tokens)
        rows = ",".join(str(r) for r in range(2, self.max_gamma + 2))
        prefill = ",".join(str(p) for p in self.prefill_tokens)
        catchup = [["-p", rows, "-n", "0", "-d", depths, *common]] if draft else []
        gen = ["-p", "0", "-n", str(GEN_FORWARDS), "-d", depths, *common]
        return [gen, *catchup, ["-p", prefill, "-n", "0", "-d", "0", *common]]

    def verify_runs(self) -> list[list[str]]:
        """The ``llama-batched-bench`` argument lists of the verification grid: per row count R, R sequences
        of depth/R tokens (each depth ``repetitions`` times), :data:`GEN_FORWARDS` steps."""
        out = []
        for r in range(2, self.max_gamma + 2):
            pp = ",".join(str(max(1, d // r)) for d in self.depths_tokens for _ in range(self.repetitions))
            threads = ["-t", str(self.threads), "-tb", str(self.threads), "-c", "4096", "-kvu"]
            out.append(
                [*threads, "-npp", pp, "-ntg", str(GEN_FORWARDS), "-npl", str(r), "--output-format", "jsonl"]
            )
        return out


def run_bench(
    llama: LlamaCpp, model: str, args: list[str], niceness: int = 0, tool: str = "llama-bench"
) -> str:
    """One ``llama-bench`` (or ``tool``) run's stdout (JSONL); SpecsimError with its last error line when it
    fails."""
    cmd = [llama.path(tool), "-m", model, *args]
    if niceness:
        cmd = ["nice", "-n", str(niceness), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SpecsimError(f"{tool} failed on {model}: {tail}")
    return proc.stdout + proc.stderr  # llama-batched-bench writes its records to the log


def measure_model(llama: LlamaCpp, model: str, plan: GridPlan, *, draft: bool) -> list[BenchRecord]:
    """Every ``llama-bench`` test of ``plan`` on one GGUF."""
    out = []
    for args in plan.runs(draft):
        out += parse_bench_jsonl(run_bench(llama, model, args, plan.niceness))
    return out


def measure_verify(llama: LlamaCpp, model: str, plan: GridPlan) -> list[BatchedRecord]:
    """The verification grid's ``llama-batched-bench`` points on the target."""
    out = []
    for args in plan.verify_runs():
        out += parse_batched_jsonl(run_bench(llama, model, args, plan.niceness, "llama-batched-bench"))
    return out


def _verify_grid(records: list[BatchedRecord], rows: tuple[int, ...], depths) -> CostGrid:
    """R rows with logits at each depth: the step ms of R sequences of depth/R tokens each."""
    cells: dict[tuple[int, float], list[float]] = defaultdict(list)
    for r in records:
        depth = min(depths, key=lambda d: abs(max(1, d // r.sequences) - r.prompt_tokens))
        cells[(r.sequences, float(depth))].append(r.step_ms)
    return _from_cells(cells, rows, "llama-batched-bench")


def _grid(records: list[BenchRecord], rows: tuple[int, ...], prefill: bool = False) -> CostGrid:
    """A grid of the records at ``rows`` (prompt tests at depth 0 when ``prefill``: rows along the grid's
    rows, context 0); medians and 95% half-widths of the repetitions."""
    cells: dict[tuple[int, float], list[float]] = defaultdict(list)
    for r in records:
        if r.rows in rows and (r.depth_tokens == 0) == prefill:
            cells[(r.rows, 0.0 if prefill else r.context_tokens)].extend(r.pass_ms)
    return _from_cells(cells, rows, "llama-bench")


def _from_cells(cells: dict, rows: tuple[int, ...], tool: str) -> CostGrid:
    """A grid of medians, 95 % half-widths and counts of the samples per (rows, context) cell."""
    contexts = sorted({c for _, c in cells})
    missing = [(r, c) for r in rows for c in contexts if (r, c) not in cells]
    if not cells or missing:
        raise SpecsimError(f"{tool}: no timing of rows x context {missing or rows}")
    stats = [[summarize(cells[(r, c)]) for c in contexts] for r in rows]
    values = [[[[getattr(s, f)] for s in row] for row in stats] for f in ("median_ms", "halfwidth_ms", "n")]
    return make_grid(rows, contexts, (1,), *values)


def pass_grids(
    target: list[BenchRecord], draft: list[BenchRecord], verify: list[BatchedRecord], plan: GridPlan
) -> dict[str, CostGrid]:
    """The cost model's grids from both models' tests (module docstring), by field name."""
    rows = tuple(range(2, plan.max_gamma + 2))
    prefill = tuple(sorted(plan.prefill_tokens))
    step = _grid(draft, (1,))
    return {
        "target_decode": _grid(target, (1,)),
        "target_verify": _verify_grid(verify, rows, plan.depths_tokens),
        "draft_first": step,
        "draft_next": step,
        "draft_catchup": _grid(draft, rows),
        "target_prefill": _grid(target, prefill, prefill=True),
        "draft_prefill": _grid(draft, prefill, prefill=True),
    }
