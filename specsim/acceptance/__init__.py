"""Acceptance: closed forms, τ at γ from the best evidence, exact trace replay, Monte Carlo."""
