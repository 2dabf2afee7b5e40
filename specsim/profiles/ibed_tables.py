"""The shipped profile of IbED (Lee et al. 2024; LLaVA-1.5-7B target, LLaVA-1.5-68M draft, γ=5), built from
its tables.

Source: ``specsim/data/ibed_block_efficiency.csv`` (Tables 1a/1b/2/3/5/6 transcribed). The paper
gives τ at γ=5 for every method and dataset, and wall-clock speedups only for M and T (Table 1b).
From those we derive the block cost γ·c + v at γ=5 = τ / speedup (the mean over the 16 cells);
nothing else (absolute ms, Tv at other γ) is given, so nothing else is filled in.
Regenerate the JSON with ``python -m specsim.profiles.ibed_tables``.
"""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np

from specsim.profile_format import BlockCost, LatencySection, MethodAcceptance, Profile, Provenance
from specsim.profiles import PROFILES_DIR, save_profile

CITATION = (
    "Lee et al., 'In-batch Ensemble Drafting: Toward Fast and Robust Speculative Decoding for "
    "Multimodal Language Models' (IbED), Tables 1-6"
)
GAMMA = 5
IMAGES_PER_PROMPT = {
    "ChartQA": 1,
    "TextVQA": 1,
    "VQAv2": 1,
    "HallusionBench": 1,
    "Spot": 2,
    "IEdit": 2,
    "PororoSV": 5,
    "VIST": 5,
}
# Ensemble members (IbED §6.2: equal weights); the draft runs them as one batch.
ENSEMBLES = {"MT": 2, "MC": 2, "MTC": 3, "MTCP": 4}
PROFILE_NAME = "ibed-llava1.5-7b-68m"


def read_table() -> tuple[list[str], dict[tuple[str, str, str], list[float]]]:
    """(dataset names, {(table, metric, method): values per dataset}) from the shipped CSV."""
    text = resources.files("specsim").joinpath("data/ibed_block_efficiency.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(line for line in text.splitlines() if line and not line.startswith("#")))
    header, body = rows[0], rows[1:]
    datasets = header[3:]
    return datasets, {(r[0], r[1], r[2]): [float(x) for x in r[3:]] for r in body}


def derive_block_cost(table: dict[tuple[str, str, str], list[float]]) -> tuple[float, np.ndarray]:
    """γ·c + v at γ=5 as the mean of τ (Table 1a) / speedup (Table 1b) over M and T; also every cell."""
    ratios = np.array(
        [t / s for m in ("M", "T") for t, s in zip(table[("1a", "tau", m)], table[("1b", "speedup", m)])]
    )
    return float(ratios.mean()), ratios


def build_profile() -> Profile:
    """The published IbED profile as a :class:`Profile`."""
    datasets, table = read_table()
    cost, ratios = derive_block_cost(table)
    entries: list[MethodAcceptance] = []
    seen: set[str] = set()
    for (tab, metric, method), values in table.items():
        if metric != "tau" or method in seen:
            continue
        seen.add(method)
        members = ENSEMBLES.get(method, 1)
        for dataset, tau in zip(datasets, values):
            entries.append(
                MethodAcceptance(
                    method=method,
                    scenario=dataset,
                    task=dataset,
                    images_per_prompt=IMAGES_PER_PROMPT[dataset],
                    gamma=GAMMA,
                    tau=tau,
                    draft_batch_size=members,
                    uses_draft_vision=method.startswith(("M", "P", "pool")),
                    weights=tuple([1.0] * members) if members > 1 else None,
                    notes=f"Table {tab}",
                )
            )
    derivation = (
        f"tau (Table 1a) / speedup (Table 1b) for M and T over 8 datasets: mean {cost:.4f}, "
        f"range {ratios.min():.4f}..{ratios.max():.4f} (16 cells); gamma=5, greedy, batch 1"
    )
    return Profile(
        name=PROFILE_NAME,
        description=(
            "IbED (Lee et al. 2024): LLaVA-1.5-7B target, LLaVA-1.5-68M draft, gamma=5, greedy, "
            "128 new tokens"
        ),
        provenance=Provenance(
            target="llava-hf/llava-1.5-7b-hf",
            draft="LLaVA-1.5-68M (LLaMA-68M, visual instruction tuned)",
            device="not stated per table (paper's GPU)",
            dtype="not stated",
            date="2024",
            source=f"published: {CITATION}",
            weights="n/a",
            notes="Only tau at gamma=5 and gamma*c+v at gamma=5 are known; absolute ms and Tv at other "
            "gamma are not given by the paper and are left absent. VIST is grouped with 5 images as in "
            "the paper's tables (its Appendix B mentions sequences of 3).",
        ),
        latency=LatencySection(
            block_cost=BlockCost(gamma=GAMMA, gamma_c_plus_v=round(cost, 4), derivation=derivation)
        ),
        acceptance=tuple(entries),
    )


def main() -> None:
    path = save_profile(build_profile(), PROFILES_DIR / "published" / f"{PROFILE_NAME}.json")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
