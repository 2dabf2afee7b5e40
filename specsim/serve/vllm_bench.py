"""A workload from a ``vllm bench serve`` result file, and the figures it measured, to read beside the
simulation.

Reads the JSON of ``vllm bench serve --save-result --save-detailed``: ``request_rate`` (a number or "inf";
required), ``burstiness``, per request ``input_lens``, ``output_lens`` and ``errors``, and summaries such as
``median_ttft_ms``. The file keeps no arrival times: they are redrawn from the rate and burstiness with the
caller's seeded generator (as vLLM draws them). Failed and empty requests are left out; all are text-only.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.measured_pair import same_architecture
from specsim.hardware.model import ModelSpec
from specsim.hardware.model_resolution import load_model_spec
from specsim.jsonio import field_int, field_num, parse_json, read_text
from specsim.serve.arrivals import MAX_REQUESTS, Requests, arrivals, check_span

# the result's summary fields specsim can compare with (ms, except throughputs: per second)
MEASURED_FIELDS = (
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "output_throughput",
    "request_throughput",
)


@dataclass(frozen=True)
class VllmBenchResult:
    """What a result file says: per request prompt and output tokens, the rate (None: "inf"), burstiness, the
    model, and the summary figures it measured (those of :data:`MEASURED_FIELDS` present)."""

    input_lens: np.ndarray
    output_lens: np.ndarray
    request_rate: float | None
    burstiness: float
    model_id: str
    measured: dict

    def requests(self, rng: np.random.Generator) -> Requests:
        """The workload: arrivals redrawn at the file's rate and burstiness (all at 0 for "inf")."""
        n = len(self.input_lens)
        if self.request_rate is None:
            return Requests(np.zeros(n), self.input_lens, np.zeros(n, dtype=np.int64), self.output_lens)
        times = arrivals(n, self.request_rate, rng, self.burstiness)
        return Requests(times, self.input_lens, np.zeros(n, dtype=np.int64), self.output_lens)

    def model_note(self, target: ModelSpec) -> str | None:
        """A note when the file's ``model_id`` is not ``target``'s architecture, or cannot be sized: its
        measured figures are then another model's (None: the same, or the file names none)."""
        if not self.model_id:
            return None
        try:
            if same_architecture(load_model_spec(self.model_id), target):
                return None
            why = f"not {target.name}"
        except SpecsimError:
            why = f"which specsim cannot size to tell whether it is {target.name}"
        return f"the vllm bench serve result measured {self.model_id}, {why}: its figures are not this run's"


def _int_list(d: dict, key: str, where: str) -> list[int]:
    value = d.get(key)
    if not isinstance(value, list) or not value:
        raise SpecsimError(
            f"{where}.{key}: expected a non-empty list (run vllm bench serve with --save-detailed)"
        )
    if len(value) > MAX_REQUESTS:
        raise SpecsimError(f"{where}.{key}: expected at most {MAX_REQUESTS} requests, got {len(value)}")
    return [field_int(v, f"{where}.{key}[{i}]", lo=0, unit="tokens") for i, v in enumerate(value)]


def read_vllm_bench_result(path: str) -> VllmBenchResult:
    """Read and check a ``vllm bench serve --save-result --save-detailed`` JSON file (module docstring)."""
    where = f"vllm result {str(path)!r}"
    d = parse_json(read_text(path, "vllm result"), where, allow_nan=True)
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected a JSON object (vllm bench serve --save-result)")
    inputs, outputs = _int_list(d, "input_lens", where), _int_list(d, "output_lens", where)
    if len(inputs) != len(outputs):
        raise SpecsimError(
            f"{where}: expected input_lens and output_lens of the same length, got {len(inputs)} and "
            f"{len(outputs)}"
        )
    errors = d.get("errors", [""] * len(inputs))
    if not isinstance(errors, list) or len(errors) != len(inputs):
        raise SpecsimError(f"{where}.errors: expected one entry per request ({len(inputs)})")
    keep = [i for i in range(len(inputs)) if not errors[i] and outputs[i] >= 1 and inputs[i] >= 1]
    if not keep:
        raise SpecsimError(f"{where}: no request succeeded with at least one prompt and one output token")
    if "request_rate" not in d:
        raise SpecsimError(f'{where}.request_rate: missing (a rate in req/s, or "inf": all at once)')
    rate = d["request_rate"]
    if rate in ("inf", "Infinity") or (isinstance(rate, float) and rate == float("inf")):
        rate = None
    else:
        rate = field_num(rate, f"{where}.request_rate", unit="rate_per_s")
        check_span(len(keep), rate, f"{where}.request_rate")
    burst = field_num(d.get("burstiness", 1.0), f"{where}.burstiness", unit="burstiness")
    measured = {}
    for key in MEASURED_FIELDS:
        value = d.get(key)
        if value is not None and not (isinstance(value, float) and not np.isfinite(value)):
            measured[key] = field_num(value, f"{where}.{key}", lo=0)
    for stem in ("ttft", "tpot"):  # a p99 below the median: no distribution has it
        low, high = measured.get(f"median_{stem}_ms"), measured.get(f"p99_{stem}_ms")
        if low is not None and high is not None and high < low:
            raise SpecsimError(f"{where}.p99_{stem}_ms: expected >= median_{stem}_ms ({low:g}), got {high:g}")
    model = d.get("model_id", "")
    return VllmBenchResult(
        np.asarray([inputs[i] for i in keep], dtype=np.int64),
        np.asarray([outputs[i] for i in keep], dtype=np.int64),
        rate,
        burst,
        model if isinstance(model, str) else "",
        measured,
    )
