"""The textbook and specsim side by side on llama.cpp's own speculative decoding, and the per-block terms.

Reads a llama.cpp profile with check rows (``specsim check --runtime llama.cpp``) and prints, per row:
measured tokens/s and speedup; the textbook τ/(γ·c + 1) (Leviathan: v = 1, no work outside the forwards)
and the textbook with llama.cpp's measured Tv, τ/(γ·c + v), both with the run's own τ; specsim with τ from
the run's counts and from the traces. Then a block at each γ split into its terms (draft steps, the
verification, the draft's catch-up pass, the work per block and per emitted token), priced at one context.

    python bench/llama_cpp_table.py --profile llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu [--context 80]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402
from specsim.check.comparison import BLOCK_TERM, TARGET_TERM  # noqa: E402
from specsim.costs.grid_pass_cost import GridPassCost  # noqa: E402
from specsim.costs.pass_cost import CATCHUP, DRAFT, TARGET, draft_steps_ms  # noqa: E402
from specsim.profiles import load_profile  # noqa: E402
from specsim.report import format_table  # noqa: E402


def rows_table(profile, ctx: float) -> str:
    cost = GridPassCost.request(profile.latency)
    body = []
    for r in sorted(
        (r for r in profile.checks if r.runtime == "llama.cpp"), key=lambda r: (r.draft or "", r.gamma)
    ):
        step = r.terms_ms_per_block[TARGET_TERM]["measured"]
        block = r.terms_ms_per_block[BLOCK_TERM]["measured"]
        tp = float(cost.pass_ms(TARGET, 1, ctx).ms)
        g = r.gamma
        ngram = r.draft is not None
        c = 0.0 if ngram else float(cost.pass_ms(DRAFT, 1, ctx).ms) / tp
        v = float(cost.pass_ms(TARGET, g + 1, ctx).ms) / tp
        tau = r.tau_measured
        base_tps, sd_tps = 1000.0 / step, 1000.0 * tau / block
        book1 = tau / (g * c + 1.0)
        book_v = tau / (g * c + v)
        body.append(
            [
                r.draft or f"draft γ={g}",
                f"{tau:.2f}",
                f"{base_tps:.1f}",
                f"{sd_tps:.1f}",
                f"{r.speedup_measured:.3f} ±{(r.speedup_halfwidth or 0):.1%}",
                f"{book1:.3f}",
                f"{book_v:.3f}",
                f"{r.speedup_predicted_counts:.3f}",
                f"{r.speedup_predicted:.3f}",
                f"{r.speedup_predicted_counts / r.speedup_measured - 1:+.1%}",
                f"{r.speedup_predicted / r.speedup_measured - 1:+.1%}",
            ]
        )
    head = [
        "row",
        "τ",
        "target tok/s",
        "SD tok/s",
        "speedup meas",
        "textbook v=1",
        "textbook Tv",
        "specsim counts",
        "specsim traces",
        "err counts",
        "err traces",
    ]
    return format_table(head, body)


def terms_table(profile, context: float, gammas) -> str:
    cost = GridPassCost.request(profile.latency)
    tok = cost.token_overhead_ms()
    body = []
    for g in gammas:
        draft = float(draft_steps_ms(cost, context + np.arange(g), 1).ms.sum())
        verify = float(cost.pass_ms(TARGET, g + 1, context).ms)
        catch = float(cost.pass_ms(DRAFT, g + 1, context, kind=CATCHUP).ms)
        block = float(cost.block_overhead_ms(g, 1))
        textbook = draft + float(cost.pass_ms(TARGET, g + 1, context).ms)
        gap = catch + block + tok
        body.append(
            [
                str(g),
                f"{draft:.1f}",
                f"{verify:.1f}",
                f"{catch:.1f}",
                f"{block:.1f}",
                f"{tok:.1f}/token",
                f"{textbook:.1f}",
                f"{gap:.1f} + {tok:.1f}·a",
            ]
        )
    head = [
        "γ",
        "γ draft steps",
        "Tv(γ)",
        "draft catch-up (γ+1 rows)",
        "per block at γ",
        "per token",
        "textbook block",
        "gap over it",
    ]
    step = float(cost.pass_ms(TARGET, 1, context).ms)
    return (
        f"at context {context:g}: Tp {step:.1f} ms + {cost.step_overhead_ms():.1f} ms per target-only step\n"
        + format_table(head, body)
    )


def main() -> None:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--context", type=number_arg("tokens"), default=80.0)
    args = p.parse_args()
    profile = load_profile(args.profile)
    print(rows_table(profile, args.context))
    print()
    print(terms_table(profile, args.context, range(1, profile.latency.forward_costs().max_gamma + 1)))


if __name__ == "__main__":
    sys.exit(run_main(main))
