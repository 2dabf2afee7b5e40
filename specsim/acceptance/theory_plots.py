"""Theory plots for notebooks and the CLI; matplotlib is imported inside each function, never at import."""

from __future__ import annotations

import numpy as np

from specsim.acceptance.theory import optimal_gamma, speedup, tau_iid


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5, 3.5))
    return ax


def plot_tau_vs_alpha(gammas=(1, 3, 5, 8), ax=None):
    """τ(α) = (1 − α^(γ+1))/(1 − α) for several γ."""
    ax = _axes(ax)
    alpha = np.linspace(0, 1, 201)
    for g in gammas:
        ax.plot(alpha, tau_iid(alpha, g), label=f"γ={g}")
    ax.set(xlabel="α (per-token acceptance)", ylabel="τ (tokens per block)", title="Block efficiency")
    ax.legend()
    return ax


def plot_speedup_vs_gamma(alpha: float, cs=(0.02, 0.05, 0.1, 0.2), gamma_max: int = 12, v=None, ax=None):
    """speedup(γ) = τ(α, γ)/(γ·c + v(γ)) for several c; ``v``: array over γ = 1..gamma_max or None (v=1)."""
    ax = _axes(ax)
    gammas = np.arange(1, gamma_max + 1)
    vv = np.ones(gamma_max) if v is None else np.asarray(v, dtype=float)
    for c in cs:
        ax.plot(gammas, speedup(tau_iid(alpha, gammas), gammas, c, vv), marker="o", label=f"c={c}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="γ (draft tokens per block)", ylabel="speedup", title=f"Speedup at α={alpha}")
    ax.legend()
    return ax


def optimal_gamma_grid(alphas, cs, gamma_max: int = 16, v=None):
    """(best γ, best speedup) on the grid α × c, arrays of shape (len(cs), len(alphas))."""
    a = np.asarray(alphas, dtype=float)[None, :]
    c = np.asarray(cs, dtype=float)[:, None]
    return optimal_gamma(a, c, v, gamma_max=gamma_max)


def plot_optimal_gamma_map(alphas=None, cs=None, gamma_max: int = 16, ax=None):
    """The optimal γ over (α, c), as an image with contour labels of the best speedup."""
    ax = _axes(ax)
    alphas = np.linspace(0.05, 0.95, 91) if alphas is None else np.asarray(alphas)
    cs = np.geomspace(0.005, 0.5, 60) if cs is None else np.asarray(cs)
    g, s = optimal_gamma_grid(alphas, cs, gamma_max)
    mesh = ax.pcolormesh(alphas, cs, g, shading="auto", cmap="viridis")
    ax.figure.colorbar(mesh, ax=ax, label="optimal γ")
    cont = ax.contour(alphas, cs, s, levels=[1.0, 1.5, 2.0, 3.0, 4.0], colors="white", linewidths=0.8)
    ax.clabel(cont, fmt="%.1f×", fontsize=8)
    ax.set(xscale="linear", yscale="log", xlabel="α", ylabel="c = Tq/Tp", title="Optimal γ (v = 1)")
    return ax
