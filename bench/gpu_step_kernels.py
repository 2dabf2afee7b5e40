"""Time a Llama decode step's kernels at batch B x rows over a KV cache of C tokens, CUDA-graph captured.

A serving engine (vLLM, SGLang) replays each decode step as a captured CUDA graph, so what a step costs
there is its kernels, not the host's launches. This bench measures that cost on a GPU for a pair's
language models (default: the LLaVA-1.5-7B target and its 68M draft from ``specsim/presets``, random bf16
weights: latency does not depend on weight values), at every B x rows x context asked for:

- ``target`` rows = 1 is the target-only decode step Tp(B); rows = γ+1 is the verify pass Tv(γ, B);
- ``draft`` rows = 1 is one draft step Tq(B) (a block drafts γ of them).

The step is gpt-fast style: fused QKV and gate/up projections, rotary embedding, one static KV cache per
layer written in place, SDPA over the C cached columns plus the new rows, logits for every row and their
argmax (a verify pass needs every row's logits). ``--modes hf`` times the same points through HF
transformers' own forward and DynamicCache, the hf-eager runtime. Each point is timed replaying its
captured graph (``--modes eager``: calling the same step eagerly, where the host's launches can dominate),
with a CUDA event around every replay after warm-up; the median and the 10th/90th percentiles are written.

    python bench/gpu_step_kernels.py --out gpu-steps.json            # on a GPU machine
    python bench/gpu_step_kernels.py --out t.json --tiny --device cpu # a smoke run of the code path

Writes JSON with the GPU, driver, torch and CUDA versions and the command; shipped runs go to
``specsim/data/gpu_steps/``, where ``specsim.validation.gpu_steps`` holds the planner against them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import interval_arg, number_arg  # noqa: E402
from specsim.jsonio.writing import write_json_atomic  # noqa: E402
from specsim.report import int_list_arg  # noqa: E402

PRESETS = Path(__file__).resolve().parents[1] / "specsim" / "presets"
SCHEMA = "gpu-step-kernels/1"


@dataclass(frozen=True)
class Dims:
    """A Llama language model's shape (the text config of a preset)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    inter: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes(self, batch: int, columns: int, element_bytes: int) -> int:
        """Bytes of a KV cache of ``columns`` positions for ``batch`` rows."""
        return 2 * self.layers * batch * self.kv_heads * columns * self.head_dim * element_bytes


def text_config(name: str) -> dict:
    """The language model's config of ``specsim/presets/NAME.json`` (a VLM's ``text_config``)."""
    config = json.loads((PRESETS / f"{name}.json").read_text())
    return dict(config.get("text_config", config))


CONFIG_KEYS = {  # Dims field: its key in a transformers config
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "inter": "intermediate_size",
    "vocab": "vocab_size",
}


def preset_dims(name: str) -> Dims:
    """The text model's dims of ``specsim/presets/NAME.json`` (no KV-head count: one per head)."""
    text = text_config(name)
    text["num_key_value_heads"] = text.get("num_key_value_heads") or text["num_attention_heads"]
    return Dims(**{field: text[key] for field, key in CONFIG_KEYS.items()})


TINY = Dims(hidden=64, layers=2, heads=4, kv_heads=2, inter=128, vocab=101)


class Model:
    """Random weights and one static KV cache [B_max, kv_heads, C + rows_max, head_dim] per layer."""

    def __init__(self, dims: Dims, device: torch.device, dtype: torch.dtype, gen: torch.Generator):
        d, hd = dims, dims.head_dim

        def w(*shape):
            return torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 0.02

        qkv = (d.heads + 2 * d.kv_heads) * hd
        self.dims = d
        self.embed = w(d.vocab, d.hidden)
        self.layers = [
            dict(
                wqkv=w(d.hidden, qkv),
                wo=w(d.heads * hd, d.hidden),
                w13=w(d.hidden, 2 * d.inter),
                w2=w(d.inter, d.hidden),
                n1=torch.ones(d.hidden, device=device, dtype=dtype),
                n2=torch.ones(d.hidden, device=device, dtype=dtype),
            )
            for _ in range(d.layers)
        ]
        self.norm = torch.ones(d.hidden, device=device, dtype=dtype)
        self.head = w(d.hidden, d.vocab)
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []

    def allocate(self, batch: int, columns: int) -> None:
        """A KV cache of ``columns`` per row for up to ``batch`` rows (random values: cost is the same)."""
        self.cache = []
        d = self.dims
        for _ in range(d.layers):
            shape = (batch, d.kv_heads, columns, d.head_dim)
            k = torch.empty(shape, device=self.embed.device, dtype=self.embed.dtype).normal_()
            self.cache.append((k, torch.empty_like(k).normal_()))

    def cache_bytes(self, batch: int, columns: int) -> int:
        return self.dims.kv_bytes(batch, columns, self.embed.element_size())

    def step(self, tokens: torch.Tensor, context: int) -> torch.Tensor:
        """One decode/verify pass of ``tokens`` [B, R] after ``context`` cached tokens: argmax ids [B, R]."""
        d, hd = self.dims, self.dims.head_dim
        batch, rows = tokens.shape
        x = self.embed[tokens]
        angle = torch.arange(rows, device=x.device, dtype=torch.float32)[:, None] / (
            10000.0 ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
        )
        cos, sin = torch.cat([angle.cos()] * 2, -1).to(x.dtype), torch.cat([angle.sin()] * 2, -1).to(x.dtype)
        for layer, (k_cache, v_cache) in zip(self.layers, self.cache):
            h = _rms(x, layer["n1"])
            q, k, v = (h @ layer["wqkv"]).split([d.heads * hd, d.kv_heads * hd, d.kv_heads * hd], dim=-1)
            q = _rope(q.view(batch, rows, d.heads, hd), cos, sin).transpose(1, 2)
            k = _rope(k.view(batch, rows, d.kv_heads, hd), cos, sin).transpose(1, 2)
            k_cache[:batch, :, context : context + rows] = k
            v_cache[:batch, :, context : context + rows] = v.view(batch, rows, d.kv_heads, hd).transpose(1, 2)
            keys = k_cache[:batch, :, : context + rows]
            values = v_cache[:batch, :, : context + rows]
            o = F.scaled_dot_product_attention(q, keys, values, enable_gqa=d.kv_heads != d.heads)
            x = x + o.transpose(1, 2).reshape(batch, rows, d.heads * hd) @ layer["wo"]
            gate, up = (_rms(x, layer["n2"]) @ layer["w13"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["w2"]
        return (_rms(x, self.norm) @ self.head).argmax(-1)


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


# --------------------------------------------------------------------------- timing
def _times_ms(run, device: torch.device, budget_s: float, min_n: int, max_n: int) -> list[float]:
    """ms of each of n calls of ``run`` after warm-up: CUDA events on a GPU, else perf_counter."""
    for _ in range(3):
        run()
    if device.type != "cuda":
        out = []
        for _ in range(min_n):
            t0 = time.perf_counter()
            run()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize(device)
    n = int(min(max_n, max(min_n, budget_s / max(time.perf_counter() - t0, 1e-6))))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    events[0].record()
    for i in range(n):
        run()
        events[i + 1].record()
    torch.cuda.synchronize(device)
    return [events[i].elapsed_time(events[i + 1]) for i in range(n)]


def _graphed(model: Model, tokens: torch.Tensor, context: int, pool):
    """Capture one step of ``tokens``' shape as a CUDA graph; returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            model.step(tokens, context)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        model.step(tokens, context)
    return graph


def _quantiles(values: list[float]) -> dict:
    s = sorted(values)

    def q(p):
        return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]

    return {"ms_median": q(0.5), "ms_p10": q(0.1), "ms_p90": q(0.9), "repeats": len(s)}


def _record(out: list, name: str, context: int, batch: int, rows: int, mode: str, times: list[float]) -> None:
    """Append one point (its median and 10th/90th percentiles, ms) to ``out`` and print it."""
    point = dict(model=name, context_tokens=context, batch=batch, rows=rows, mode=mode, **_quantiles(times))
    out.append(point)
    print(
        f"{name:6s} C={context:5d} B={batch:4d} rows={rows:2d} {mode:8s} {point['ms_median']:8.3f} ms "
        f"(p10 {point['ms_p10']:.3f}, p90 {point['ms_p90']:.3f})",
        flush=True,
    )


def sweep(model: Model, name: str, args, device: torch.device, rows_list, out: list) -> None:
    """Time ``model`` at every context x batch x rows that fits the KV budget; append points to ``out``."""
    rows_max = max(rows_list)
    for context in args.contexts:
        columns = context + rows_max
        batches = [b for b in args.batches if model.cache_bytes(b, columns) <= args.kv_budget_gib * 2**30]
        if not batches:
            continue
        model.allocate(max(batches), columns)
        pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
        for batch in batches:
            for rows in rows_list:
                tokens = torch.randint(0, model.dims.vocab, (batch, rows), device=device)
                modes = []
                if "graph" in args.modes and device.type == "cuda":
                    graph = _graphed(model, tokens, context, pool)
                    modes.append(("graph", graph.replay))
                if "eager" in args.modes or not modes:
                    modes.append(("eager", lambda t=tokens, c=context: model.step(t, c)))
                for mode, run in modes:
                    times = _times_ms(run, device, args.budget_s, args.min_repeats, args.max_repeats)
                    _record(out, name, context, batch, rows, mode, times)
                del modes
        model.cache = []
        if device.type == "cuda":
            torch.cuda.empty_cache()


def hf_sweep(preset: str, name: str, args, device: torch.device, dtype, rows_list, out: list) -> None:
    """The same points through HF transformers' eager forward with its DynamicCache (the hf-eager runtime):
    prefill C random tokens per B, then time forward(B x rows) + argmax + crop back to C."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from calibrate.run.engine import crop_cache, new_cache, with_cache

    text, dims = text_config(preset), TINY if args.tiny else preset_dims(preset)
    text.update({key: getattr(dims, field) for field, key in CONFIG_KEYS.items()})
    known = LlamaConfig().to_dict()
    keep = {k: v for k, v in text.items() if k in known and k not in ("architectures", "model_type")}
    torch.manual_seed(args.seed)
    with torch.device(device):  # built where it runs: a 7B model's random init on the host is slow
        config = LlamaConfig(**keep, attn_implementation="sdpa")
        model = LlamaForCausalLM._from_config(config, dtype=dtype).eval()
    vocab = model.config.vocab_size
    for context in args.contexts:
        columns = context + max(rows_list)
        element_bytes = torch.finfo(dtype).bits // 8
        # the DynamicCache copies each layer's cache to append a pass's rows: room for two of it
        fits = [
            b
            for b in args.batches
            if 2 * dims.kv_bytes(b, columns, element_bytes) <= args.kv_budget_gib * 2**30
        ]
        for batch in fits:
            cache = new_cache()
            prompt = torch.randint(0, vocab, (batch, context), device=device)
            model(prompt, **with_cache(model, cache), use_cache=True, logits_to_keep=1)
            for rows in rows_list:
                ids = torch.randint(0, vocab, (batch, rows), device=device)

                def run(ids=ids, cache=cache, context=context, model=model):
                    model(ids, **with_cache(model, cache), use_cache=True).logits.argmax(-1)
                    crop_cache(cache, context)

                times = _times_ms(run, device, args.budget_s, args.min_repeats, args.max_repeats)
                _record(out, name, context, batch, rows, "hf-eager", times)
            del cache, prompt
            if device.type == "cuda":
                torch.cuda.empty_cache()
    del model


def provenance(device: torch.device, dtype: torch.dtype) -> dict:
    """Where the figures came from: GPU, driver, torch, CUDA, dtype, command, date."""
    info = {
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "command": " ".join(sys.argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            multiprocessors=props.multi_processor_count,
            cuda=torch.version.cuda,
        )
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("graph", "eager", "hf")]
    if not modes or bad:
        raise argparse.ArgumentTypeError(f"expected modes from graph, eager, hf, got {text!r}")
    return modes


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--target", default="llava-1.5-7b", help="target preset (specsim/presets)")
    p.add_argument("--draft", default="llava-1.5-68m", help="draft preset")
    p.add_argument("--tiny", action="store_true", help="tiny dims for both models (a smoke run)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ints, tokens = int_list_arg("batch"), int_list_arg("tokens")
    repeats, gib = number_arg("repeats", integer=True), interval_arg(0, 1e6, "GiB in (0, 1e6]", lo_open=True)
    p.add_argument("--contexts", type=tokens, default=[1024], help="cached tokens per request")
    p.add_argument("--batches", type=ints, default=[1, 2, 4, 8, 16, 32, 48, 64, 96])
    p.add_argument("--rows", type=ints, default=list(range(1, 10)), help="target rows per pass (γ+1)")
    p.add_argument("--draft-rows", type=ints, default=[1])
    p.add_argument("--kv-budget-gib", type=gib, default=56.0, help="largest KV cache to allocate (GiB)")
    p.add_argument(
        "--modes",
        type=_modes,
        default=["graph"],
        help="graph (captured step), eager (the same step called eagerly), hf (HF transformers' "
        "forward with its DynamicCache), comma-separated; on a CPU graph falls back to eager",
    )
    p.add_argument("--hf-rows", type=ints, default=[1, 2, 4, 6, 9], help="target rows of the HF sweep")
    p.add_argument("--budget-s", type=number_arg("seconds"), default=0.25, help="timed seconds per point")
    p.add_argument("--min-repeats", type=repeats, default=10)
    p.add_argument("--max-repeats", type=repeats, default=200)
    p.add_argument("--seed", type=number_arg("seed", integer=True), default=0)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = True
    gen = torch.Generator(device=device).manual_seed(args.seed)
    points: list[dict] = []
    dims = {}
    kernels = [("draft", args.draft, args.draft_rows), ("target", args.target, args.rows)]
    hf = [kernels[0], ("target", args.target, args.hf_rows)] if "hf" in args.modes else []
    with torch.no_grad():
        for name, preset, rows in kernels if {"graph", "eager"} & set(args.modes) else []:
            dims[name] = TINY if args.tiny else preset_dims(preset)
            model = Model(dims[name], device, dtype, gen)
            sweep(model, name, args, device, rows, points)
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
        for name, preset, rows in hf:
            hf_sweep(preset, name, args, device, dtype, rows, points)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    record = {
        "schema": SCHEMA,
        "provenance": provenance(device, dtype),
        "models": {"target": args.target, "draft": args.draft},
        "dims": {k: asdict(v) for k, v in dims.items()},
        "points": points,
    }
    write_json_atomic(args.out, record)
    print(f"wrote {len(points)} points to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
