"""Seeded randomness for code that draws from torch's global generator (HF weight init)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def seeded(seed: int):
    """Seed torch's global generator inside the block only, restoring it afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
