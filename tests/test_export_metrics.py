"""Round trip: our engine's runs -> vLLM counters (exposition text) -> `specsim import vllm` -> tau(k) ==
engine's."""

import pytest
import torch

from calibrate.measure.export_metrics import counters_from_results, engine_tau, exposition_text
from calibrate.run.engine import speculative_decode
from specsim.cli.main import build_parser, main
from specsim.engines.vllm import read_counters
from specsim.predict.prediction import predict
from specsim.profiles import load_profile

torch.set_num_threads(1)
K = 5


def _setup(argv: list[str]):
    from calibrate.workload.run_setup import load_setup, read_workload

    args = build_parser().parse_args(
        ["calibrate", "acceptance", "--threads", "1", "--no-progress", "--out", "unused.json", *argv]
    )
    return load_setup(args, read_workload(args))


def _round_trip(tmp_path, results, model: str) -> dict[int, tuple[float, float]]:
    """{k: (tau from the imported profile, engine's tau)}: scrape 1 after the first request, 2 after all."""
    s1, s2 = tmp_path / "scrape1.prom", tmp_path / "scrape2.prom"
    s1.write_text(exposition_text(counters_from_results(results[:1]), model))
    s2.write_text(exposition_text(counters_from_results(results), model))
    out = tmp_path / "imported.json"
    assert (
        main(
            [
                "import",
                "vllm",
                str(s1),
                str(s2),
                "--method",
                "M",
                "--scenario",
                "rt",
                "--out",
                str(out),
                "--num-speculative-tokens",
                str(K),
                "--json",
            ]
        )
        == 0
    )
    profile = load_profile(str(out))
    window = results[1:]  # the delta of the two scrapes
    return {k: (predict(profile, k)[0].tau, engine_tau(window, k)) for k in range(1, K + 1)}


def _check(pairs: dict, results) -> None:
    for k, (imported, engine) in pairs.items():
        assert imported == engine, f"k={k}: imported {imported!r} != engine {engine!r}"
    # engine's tau(K) also equals its own emitted tokens per draft block (a second count from the records)
    blocks = [b for r in results[1:] for b in r.blocks if b.gamma > 0]
    assert pairs[K][1] == sum(b.emitted for b in blocks) / len(blocks)
    assert len({round(e, 12) for _, e in pairs.values()}) == K  # tau(k) differs for every k: not degenerate


@pytest.fixture(scope="module")
def zoo_runs():
    setup = _setup(["--preset", "zoo", "--method", "M", "--limit", "12"])
    reqs = setup.groups[2]  # the 2-image prompts
    drafter = setup.drafter("M")
    return [
        speculative_decode(setup.target, drafter, r, gamma=K, max_new_tokens=48, eos_token_id=setup.eos)
        for r in reqs
    ]


def test_zoo_round_trip_is_exact_for_every_k(zoo_runs, tmp_path):
    assert len(zoo_runs) == 4 and all(r.method == "M" for r in zoo_runs)
    pairs = _round_trip(tmp_path, zoo_runs, "zoo-target")
    _check(pairs, zoo_runs)
    counters = counters_from_results(zoo_runs)
    assert counters.histogram()[K] < counters.drafts  # some blocks rejected a draft


def test_exported_text_reads_back_the_same_counters(zoo_runs, tmp_path):
    counters = counters_from_results(zoo_runs)
    path = tmp_path / "m.prom"
    path.write_text(exposition_text(counters, "zoo-target", engine="3"))
    back, model = read_counters([path])
    assert back == counters and model == "zoo-target"
    hist = [0] * (K + 1)
    for r in zoo_runs:
        for b in r.blocks:
            if b.gamma > 0:
                hist[b.accepted] += 1
    assert counters.histogram() == tuple(hist)


@pytest.mark.slow
def test_reference_pair_round_trip_is_exact(tmp_path):
    """Reference pair (Qwen2.5-Coder 0.5B/1.5B GGUF): 2 prompts x 16 tokens; bench/engine_metrics_roundtrip.py
    runs the full set."""
    setup = _setup(["--preset", "qwen2.5-coder-0.5b-1.5b", "--prompts", "reference", "--limit", "2"])
    drafter = setup.drafter("plain")
    runs = [
        speculative_decode(setup.target, drafter, r, gamma=K, max_new_tokens=16, eos_token_id=setup.eos)
        for r in setup.requests
    ]
    pairs = _round_trip(tmp_path, runs, "qwen2.5-coder-1.5b")
    for k, (imported, engine) in pairs.items():
        assert imported == engine, k
