"""The first stage of ``bench/gpu_session.py``: calibrate's CUDA paths, checked and reported in one JSON.

- placement: a random-weight model built by ``calibrate.models.loading.build_random_model`` lies on the device
  in the dtype asked for (no parameter or buffer left on the host);
- timed regions: every ``timed`` block the engines open while decoding (one request, the static batch, the
  server loop; lossless and under a synthetic schedule) names the device, so it synchronises it
  (``calibrate/run/timing.py``); an engine that fails on the device is reported with its error;
- synchronisation: ``timed(device)`` around queued matmuls against the host clock without a synchronise;
- warm-up: the first calls of a forward against the steady median (what ``measure``'s warm-up discards);
- bf16: support, the weights' and the logits' dtypes;
- CUDA graphs: the engines run eager (off); one tiny decode step eager vs captured as a graph
  (``bench/gpu_step_kernels.py``'s step) shows what graphs would change.
"""

from __future__ import annotations

import functools
import time
import traceback
from contextlib import contextmanager

import torch

ENGINE_MODULES = ("calibrate.run.engine", "calibrate.run.batch_engine", "calibrate.run.server_loop",
                  "calibrate.drafting.text_drafter")  # fmt: skip
TINY_LLAMA = {
    "model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 512, "tie_word_embeddings": False, "initializer_range": 0.3,
}  # fmt: skip


def _guarded(fn, *args) -> dict:
    """``fn(*args)``'s dict, or its error and traceback's last lines."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - a check that fails is a result
        return {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-1500:]}


@functools.cache
def _pair(device: str, dtype: str):
    from calibrate.models.loading import build_random_model

    return [build_random_model(TINY_LLAMA, device=device, dtype=dtype, seed=s) for s in (0, 1)]


def placement(device: str, dtype: str) -> dict:
    """Where a random model's tensors lie, and in which dtypes."""
    model = _pair(device, dtype)[0]
    tensors = list(model.model.parameters()) + list(model.model.buffers())
    devices = sorted({str(t.device) for t in tensors})
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in model.model.parameters()})
    ok = all(d.split(":")[0] == device.split(":")[0] for d in devices) and dtypes == [dtype]
    return {"devices": devices, "parameter_dtypes": dtypes, "loaded_as": str(model.device), "ok": ok}


@contextmanager
def _recording_timed(seen: list):
    """Every engine module's ``timed`` replaced by one that records the device it was given."""
    import importlib

    from calibrate.run import timing

    def recorder(device="cpu", clock=None):
        seen.append(str(device))
        return timing.timed(device, clock)

    modules = [importlib.import_module(m) for m in ENGINE_MODULES]
    saved = [m.timed for m in modules]
    for m in modules:
        m.timed = recorder
    try:
        yield
    finally:
        for m, t in zip(modules, saved):
            m.timed = t


def timed_regions(device: str, dtype: str) -> dict:
    """Run each engine on the device (lossless and synthetic) recording every timed region's device."""
    import numpy as np

    from calibrate.drafting import TextDrafter
    from calibrate.run.batch_engine import batch_speculative_decode, batch_target_decode
    from calibrate.run.engine import speculative_decode, target_decode
    from calibrate.run.proposal import Request
    from calibrate.run.server_loop import serve_loop
    from calibrate.run.synthetic_acceptance import SyntheticAcceptance

    target, draft = _pair(device, dtype)
    gen = torch.Generator().manual_seed(0)
    reqs = [Request(torch.randint(0, 256, (1, n), generator=gen).to(target.device), prompt_id=f"p{n}")
            for n in (5, 9, 12)]  # fmt: skip
    schedule = SyntheticAcceptance.drawn(
        "tau:2@3", {r.prompt_id: np.full(24, 0.6) for r in reqs}, np.random.default_rng(0)
    )
    kw = {"max_new_tokens": 12}
    runs = {
        "one request": lambda: speculative_decode(target, TextDrafter(draft.model, device=device), reqs[0],
                                                  gamma=3, device=device, **kw),
        "one request, synthetic": lambda: speculative_decode(
            target, TextDrafter(draft.model, device=device), reqs[0], gamma=3, device=device,
            acceptance=schedule, **kw),
        "target-only": lambda: target_decode(target, reqs[0], device=device, **kw),
        "static batch": lambda: batch_speculative_decode(target, draft, reqs, gamma=3, **kw),
        "static batch, synthetic": lambda: batch_speculative_decode(target, draft, reqs, gamma=3,
                                                                    acceptance=schedule, **kw),
        "batch target-only": lambda: batch_target_decode(target, reqs, **kw),
        "server loop, synthetic": lambda: serve_loop(target, draft, reqs, [0.0, 0.0, 0.01], gamma=3,
                                                     acceptance=schedule, **kw),
    }  # fmt: skip
    out = {}
    for name, run in runs.items():
        seen: list = []
        with _recording_timed(seen):
            result = _guarded(lambda run=run: {"ran": type(run()).__name__})
        off = [d for d in seen if d.split(":")[0] != device.split(":")[0]]
        out[name] = result | {"timed_regions": len(seen), "not_on_device": len(off)}
    out["ok"] = all("error" not in r and not r["not_on_device"] for r in out.values())
    return out


def synchronisation(device: str) -> dict:
    """``timed(device)`` around queued work vs the host clock alone (near 0 on a GPU: the work is queued)."""
    from calibrate.run.timing import device_sync, timed

    n = 4096 if device.startswith("cuda") else 256
    x = torch.randn(n, n, device=device)

    def work():
        for _ in range(4 if device == "cpu" else 40):
            x @ x

    work()
    device_sync(device)
    with timed(device) as t:
        work()
    t0 = time.perf_counter()
    work()
    host_ms = (time.perf_counter() - t0) * 1e3
    device_sync(device)
    return {"timed_ms": t.ms, "host_clock_without_sync_ms": host_ms, "queued": device.startswith("cuda")}


def warm_up(device: str, dtype: str) -> dict:
    """The first 3 calls of a decode forward against the median of the next 10 (ms)."""
    from calibrate.run.timing import measure

    model = _pair(device, dtype)[0].model
    ids = torch.zeros(1, 64, dtype=torch.long, device=device)
    with torch.inference_mode():
        timing = measure(lambda: model(ids), device=device, warmup=0, min_repeats=13, max_repeats=13)
    samples = timing.samples_ms
    steady = sorted(samples[3:])[len(samples[3:]) // 2]
    return {"first_calls_ms": list(samples[:3]), "steady_median_ms": steady, "discarded_by_measure": 2}


def bf16(device: str, dtype: str) -> dict:
    model = _pair(device, dtype)[0].model
    with torch.inference_mode():
        logits = model(torch.zeros(1, 4, dtype=torch.long, device=device)).logits
    supported = torch.cuda.is_bf16_supported() if device.startswith("cuda") else True
    return {"supported": supported, "weights": str(model.dtype), "logits": str(logits.dtype)}


def cuda_graphs(device: str) -> dict:
    """Engines: eager (graphs off). One tiny step eager vs as a captured graph (gpu_step_kernels)."""
    out = {"engines": "off: HF forwards with a DynamicCache, eager (hf-eager runtime)"}
    if not device.startswith("cuda"):
        return out | {"graph_step": "n/a without CUDA"}
    from bench.gpu_step_kernels import TINY, Model, _graphed, _times_ms

    dev = torch.device(device)
    model = Model(TINY, dev, torch.bfloat16, torch.Generator(device=dev).manual_seed(0))
    model.allocate(1, 256 + 1)
    tokens = torch.zeros(1, 1, dtype=torch.long, device=dev)
    with torch.no_grad():
        eager = _times_ms(lambda: model.step(tokens, 256), dev, 0.05, 20, 50)
        graph = _graphed(model, tokens, 256, torch.cuda.graph_pool_handle())
        replay = _times_ms(graph.replay, dev, 0.05, 20, 50)
    return out | {"tiny_step_eager_ms": sorted(eager)[len(eager) // 2],
                  "tiny_step_graph_ms": sorted(replay)[len(replay) // 2]}  # fmt: skip


def cuda_paths(device: str, dtype: str, record: dict | None = None, saved=lambda record: None) -> dict:
    """Every check above, each guarded: a failing one is reported and the rest run; ``saved(record)`` after
    each (a stage killed at its budget keeps the checks it finished)."""
    record = dict(record or {}, device=device, dtype=dtype)
    checks = {"placement": (placement, device, dtype), "timed_regions": (timed_regions, device, dtype),
              "synchronisation": (synchronisation, device), "warm_up": (warm_up, device, dtype),
              "bf16": (bf16, device, dtype), "cuda_graphs": (cuda_graphs, device)}  # fmt: skip
    for name, (fn, *args) in checks.items():
        t0 = time.perf_counter()
        record[name] = _guarded(fn, *args) | {"check_s": round(time.perf_counter() - t0, 2)}
        saved(record)
    return record
