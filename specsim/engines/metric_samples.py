"""Labelled samples from a serving engine's metrics: Prometheus text exposition or vLLM's JSON form.

Text is parsed with ``prometheus_client.parser.text_string_to_metric_families`` (the library the
engines export with). A counter's sample may carry the ``_total`` suffix (exposition) or not
(``LLM.get_metrics()``, hand-written files); :attr:`Sample.name` is always the bare metric name and
``_created`` samples are dropped. Labels are kept as a sorted tuple, so their order in the file does
not matter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import parse_json, read_text  # noqa: F401  (read_text: used by the engine readers)

MODEL_LABEL = "model_name"  # vLLM and SGLang both label by served model name


@dataclass(frozen=True)
class Sample:
    """One metric sample: bare name (no ``_total``), sorted (label, value) pairs, value (NaN/inf kept:
    an unrelated gauge may be NaN; the readers of the spec-decode metrics check the values they use)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _bare(name: str) -> str | None:
    """Metric name without the counter suffix; None for the ``_created`` timestamps."""
    if name.endswith("_created"):
        return None
    return name[: -len("_total")] if name.endswith("_total") else name


def _sample(name: str, labels: dict, value, where: str) -> Sample | None:
    bare = _bare(name)
    if bare is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecsimError(f"{where}: {name}: expected a number, got {value!r}")
    try:
        number = float(value)
    except (
        OverflowError
    ):  # an integer beyond a float (a 400-digit count): kept as inf, like other junk values
        number = math.inf if value > 0 else -math.inf
    return Sample(bare, tuple(sorted((str(k), str(v)) for k, v in labels.items())), number)


def parse_exposition(text: str, where: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (``GET /metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: only import needs it

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                sample = _sample(s.name, s.labels, s.value, where)
                if sample is not None:
                    out.append(sample)
    except SpecsimError:
        raise
    except ValueError as err:
        first = str(err).splitlines()[0][:120] if str(err) else "unparsable line"
        raise SpecsimError(f"{where}: not Prometheus text exposition ({first})") from None
    return out


def parse_metrics_json(data, where: str) -> list[Sample]:
    """Samples of ``[dataclasses.asdict(m) for m in LLM.get_metrics()]`` (vllm/v1/metrics/reader.py).

    Counter/Gauge objects carry ``value``; the per-position ``Vector`` carries ``values`` (index =
    draft position). Histograms are skipped (no spec-decode metric is one).
    """
    if not isinstance(data, list):
        raise SpecsimError(
            f"{where}: expected a JSON list of metrics (name, labels, value/values), "
            f"got {type(data).__name__}"
        )
    out = []
    for i, m in enumerate(data):
        w = f"{where}[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise SpecsimError(f"{w}: expected an object with a 'name', got {str(m)[:60]!r}")
        labels = m.get("labels", {})
        if not isinstance(labels, dict):
            raise SpecsimError(f"{w}.labels: expected an object, got {labels!r}")
        if "values" in m:
            values = m["values"]
            if not isinstance(values, list):
                raise SpecsimError(f"{w}.values: expected a list, got {values!r}")
            out += [
                s
                for pos, v in enumerate(values)
                if (s := _sample(m["name"], labels | {"position": str(pos)}, v, w)) is not None
            ]
        elif "value" in m:
            s = _sample(m["name"], labels, m["value"], w)
            if s is not None:
                out.append(s)
        elif "buckets" not in m:
            raise SpecsimError(f"{w}: expected 'value', 'values' or 'buckets', got keys {sorted(m)}")
    return out


def read_metrics(path: str | Path) -> list[Sample]:
    """Samples of a metrics file: a JSON list (``LLM.get_metrics()``) or Prometheus text exposition."""
    where = f"metrics file {str(path)!r}"
    text = read_text(path, "metrics file")
    if text.lstrip().startswith("["):
        return parse_metrics_json(parse_json(text, where, allow_nan=True), where)
    return parse_exposition(text, where)


def series_text(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """``name{k="v",...}`` on one line (values escaped as in the exposition, long ones cut), for messages."""

    def shown(v: str) -> str:
        v = v if len(v) <= 80 else v[:77] + "..."
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return name + "{" + ",".join(f'{shown(k)}="{shown(v)}"' for k, v in labels) + "}"


def duplicate_series(s: Sample, where: str) -> SpecsimError:
    """The error for a series (name and labels) met twice in one scrape.

    A scrape holds each series once; a repeat (two scrapes pasted together, or a counter written both
    with and without ``_total``) would otherwise be summed like two data-parallel engines, silently
    doubling that count.
    """
    return SpecsimError(
        f"{where}: duplicate series {series_text(s.name, s.labels)}: the same name and labels appear "
        "twice (expected each series once per scrape; were two scrapes concatenated?)"
    )


def check_unique(samples: Iterable[Sample], where: str) -> None:
    """:func:`duplicate_series` for the first series of ``samples`` that appears twice."""
    seen = set()
    for s in samples:
        if (s.name, s.labels) in seen:
            raise duplicate_series(s, where)
        seen.add((s.name, s.labels))


def models_of(samples: Iterable[Sample], names: Iterable[str]) -> list[str]:
    """Distinct ``model_name`` label values among samples of ``names`` ('' for unlabelled ones)."""
    wanted = set(names)
    return sorted({s.label(MODEL_LABEL) or "" for s in samples if s.name in wanted})


def pick_model(models: list[str], model: str | None, where: str) -> str:
    """The one model to import: ``model`` if given (must be present), else the only one there is."""
    shown = ", ".join(repr(m) if m else "(no model_name label)" for m in models)
    if model is not None:
        if model not in models:
            raise SpecsimError(f"--model: {model!r} is not in {where} (models there: {shown or 'none'})")
        return model
    if len(models) > 1:
        raise SpecsimError(f"{where} holds several models ({shown}); pass --model NAME")
    return models[0]


def of_model(samples: Iterable[Sample], name: str, model: str) -> list[Sample]:
    """Samples named ``name`` whose ``model_name`` label is ``model`` ('' = no label)."""
    return [s for s in samples if s.name == name and (s.label(MODEL_LABEL) or "") == model]
