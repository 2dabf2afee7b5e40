"""Short-context batch sweeps in the published GPU set (issue 35, item 5): the new sources load, every new row
is at batch >= 16 or in a sweep that reaches it, contexts stay <= 2k tokens, each row is cited, no reserved
source slipped in, and every new sweep is compared by ``specsim validate --json``. Offline and fast."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from specsim.cli.main import main
from specsim.validation.batch_sweeps import published_sweeps
from specsim.validation.published_set import Source, is_reserved, load_published_set

# Sources added for short-context batch sweeps (batch >= 16, context <= 2k tokens, vLLM/SGLang/TensorRT-LLM).
NEW_SOURCES = ("tomasruiz-vllm-draft-model",)
SERVING_RUNTIMES = ("vllm", "sglang", "tensorrt-llm")
MAX_CONTEXT_TOKENS = 2048
# Reserved for an independent check: SpecDecode-Bench ("Speculative Decoding: Performance or Illusion?"), the
# Spec-Bench leaderboard and the EAGLE papers' SpS rows.
RESERVED_STRINGS = (
    "2601.11580",
    "performance or illusion",
    "specdecode-bench",
    "spec-bench",
    "specbench",
    "hemingkx",
    "2401.15077",
    "2406.16858",
    "2503.01840",
)


@pytest.fixture(scope="module")
def ps():
    return load_published_set()


def _new_rows(ps):
    return [r for r in ps.rows if r.source in NEW_SOURCES]


def test_new_sources_load_and_are_cited(ps):
    for key in NEW_SOURCES:
        src = ps.sources[key]
        assert src.title and src.authors and src.venue and src.where and src.year >= 2023
        assert not is_reserved(src)
    rows = _new_rows(ps)
    assert rows, "no rows from the new sources"
    for row in rows:
        assert row.where.strip(), row.id
        assert row.runtime in SERVING_RUNTIMES, row.id
        assert row.tau is not None and row.tau_definition, row.id
        assert row.speedup is not None, row.id
        assert row.observable == "speedup" or (row.served_only and row.load is not None), row.id
        for name in (row.target, row.draft):
            assert name.startswith("preset:") or ps.model_sources.get(name), (row.id, name)


def test_new_rows_short_context_and_reach_batch_16(ps):
    in_big_sweep = set()
    for sweep in published_sweeps(ps):
        if sweep[0].source in NEW_SOURCES and max(r.batch for r in sweep) >= 16:
            in_big_sweep.update(r.id for r in sweep)
    for row in _new_rows(ps):
        assert row.target_context_tokens <= MAX_CONTEXT_TOKENS, row.id
        assert (row.draft_context_tokens or 0) <= MAX_CONTEXT_TOKENS, row.id
        assert row.batch >= 16 or row.id in in_big_sweep, row.id


def test_new_sweeps_span_several_batch_sizes(ps):
    sweeps = [s for s in published_sweeps(ps) if s[0].source in NEW_SOURCES]
    assert sweeps
    for sweep in sweeps:
        batches = sorted({r.batch for r in sweep})
        assert len(batches) >= 4 and batches[0] == 1 and batches[-1] >= 16, batches
        assert len({r.gamma for r in sweep}) == 1  # one gamma per sweep: batch is the only thing that varies


def test_no_reserved_source_in_new_entries(ps):
    raw = json.loads((resources.files("specsim") / "data/published_gpu_measurements.json").read_text())
    texts = [json.dumps(raw["sources"][k]) for k in NEW_SOURCES]
    texts += [json.dumps(r) for r in raw["rows"] if r["source"] in NEW_SOURCES]
    for text in texts:
        low = text.lower()
        for mark in RESERVED_STRINGS:
            assert mark not in low, mark
    for src in ps.sources.values():  # nothing in the whole set is SpecDecode-Bench
        text = f"{src.title} {src.venue} {src.where}".lower()
        assert "2601.11580" not in text and "specdecode-bench" not in text


def test_specdecode_bench_is_recognised_as_reserved():
    title = "Speculative Decoding: Performance or Illusion?"
    paper = Source("sdb", title, "Liu et al.", 2026, "arXiv 2601.11580", "")
    repo = Source("sim", "simulator", "x", 2026, "https://github.com/SpecDecode-Bench/simulator", "")
    assert is_reserved(paper) and is_reserved(repo)


def test_new_sweeps_in_validate_json(ps, capsys):
    assert main(["validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sweeps = [s for s in out["batch_sweeps"] if s["source"] in NEW_SOURCES]
    expected = [s for s in published_sweeps(ps) if s[0].source in NEW_SOURCES]
    assert len(sweeps) == len(expected)
    for sweep in sweeps:
        batches = [p["batch"] for p in sweep["points"]]
        assert max(batches) >= 16 and sweep["context_tokens"] <= MAX_CONTEXT_TOKENS
        assert all(p["tau_note"] == "published" for p in sweep["points"])
    ids = {r["id"] for r in out["rows"]}
    assert {r.id for r in _new_rows(ps) if not r.served_only} <= ids
    served = {r["id"] for r in out["load_rows"]["rows"]}
    assert {r.id for r in _new_rows(ps) if r.served_only} <= served


def test_sweep_crossover_is_read_on_the_whole_grid_not_cut_by_the_catalogs_memory(ps, capsys):
    """Qwen3-32B with a 4B draft ran on a 94 GB card that the catalog's 80 GB H100 cannot hold: the sweep
    still says where SD stops paying (on the whole doubling grid) and, apart, where the catalog's device
    runs out of memory."""
    assert main(["validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sweeps = {s["label"]: s for s in out["batch_sweeps"]}
    big = sweeps["tomasruiz-vllm-draft-model: qwen3-32b / qwen3-4b"]
    assert big["max_fit_batch"] == 0 and big["grid_batches"][-1] == 4096
    assert big["pays_from"] == 1 and big["stops_from"] is not None
    below = [b for b, s in zip(big["grid_batches"], big["grid_best_speedup"]) if s < 1.0]
    assert below and min(below) == big["stops_from"]
    assert main(["validate"]) == 0
    text = capsys.readouterr().out
    assert "fit the catalog's h100-sxm at no batch" in text
    assert "never (up to batch 0)" not in text
