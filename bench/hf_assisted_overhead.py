"""Benchmark: what HF transformers' assisted generation costs outside the models, per block and per forward.

With tiny models (forwards nearly free) what remains of ``generate`` is its loop: logits processing,
stopping criteria, cache bookkeeping and, for assisted generation (``generate(assistant_model=...)``, the
``AssistedCandidateGenerator``), the assistant's own ``generate`` call per block, candidate checking and the
cache crop. Every forward of both models is timed from inside (a wrapper around ``forward``), so

    host ms = wall ms − Σ forward ms,
    per target-only step      = host of plain greedy ``generate`` / its steps,
    per assisted block        = host of assisted ``generate`` / its target forwards (one per block),
    per block beyond forwards = per assisted block − (1 + draft forwards per block) · per target-only step.

The last is the bookkeeping an SD block adds on top of one loop iteration per forward: the ``hf-eager``
runtime's ``overhead_ms_per_block`` default cites it (``specsim/hardware/runtimes/hf-eager.json``). Fixed γ
(``num_assistant_tokens_schedule = "constant"``), greedy. Run it on a quiet machine:

    python bench/hf_assisted_overhead.py --gamma 5 --new-tokens 128 --repeats 5
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def _tiny(layers: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
    )
    return LlamaForCausalLM(cfg).eval()


class _Timed:
    """Wraps a model's forward: counts calls and sums their ms."""

    def __init__(self, model):
        self.calls, self.ms, self._f = 0, 0.0, model.forward
        model.forward = self

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        out = self._f(*a, **kw)
        self.ms += (time.perf_counter() - t0) * 1e3
        self.calls += 1
        return out

    def reset(self):
        self.calls, self.ms = 0, 0.0


def main(argv: list[str] | None = None) -> int:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gamma", type=number_arg("gamma", integer=True), default=5)
    ap.add_argument("--new-tokens", type=number_arg("output_tokens", integer=True), default=128)
    ap.add_argument("--repeats", type=number_arg("repeats", integer=True), default=5)
    ap.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    args = ap.parse_args(argv)  # bad input is refused before torch loads

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    target, draft = _tiny(2, 0), _tiny(1, 0)
    draft.generation_config.num_assistant_tokens = args.gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0  # fixed γ: no early stop on low confidence
    tt, dt = _Timed(target), _Timed(draft)
    prompt = torch.randint(0, 512, (1, 32), generator=torch.Generator().manual_seed(1))
    for m in (target, draft):  # no EOS: every run emits exactly --new-tokens
        m.generation_config.eos_token_id = None
    kw = {"max_new_tokens": args.new_tokens, "do_sample": False}
    plain, assisted = [], []
    with torch.inference_mode():
        for r in range(args.repeats + 1):  # the first of each is a warm-up, not kept
            for kind in ("plain", "assisted"):
                tt.reset(), dt.reset()
                t0 = time.perf_counter()
                if kind == "plain":
                    target.generate(prompt, **kw)
                else:
                    target.generate(prompt, assistant_model=draft, **kw)
                wall = (time.perf_counter() - t0) * 1e3
                host = wall - tt.ms - dt.ms
                if r:
                    (plain if kind == "plain" else assisted).append((host, tt.calls, dt.calls))
    step = statistics.median(h / c for h, c, _ in plain)
    block = statistics.median(h / c for h, c, _ in assisted)
    drafts_per_block = statistics.median(d / c for _, c, d in assisted)
    extra = block - (1 + drafts_per_block) * step
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.threads} thread(s)")
    print(f"gamma {args.gamma}, {args.new_tokens} new tokens, {args.repeats} repeats (medians)")
    print(f"plain generate: host ms per target step            {step:.3f}")
    print(
        f"assisted generate: host ms per block                {block:.3f} "
        f"({drafts_per_block:.2f} draft forwards per block)"
    )
    print(f"per block beyond one loop iteration per forward     {extra:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
