"""A measured profile prices K decode-only steps at once (``ProfileStepCost.decode_steps_ms``) exactly as
:func:`specsim.serve.step_cost.step_ms` prices them one by one: the same floats, so a simulation's output
does not change (``bench/serve_profile_speed.py`` times it)."""

import re

import numpy as np
import pytest

from specsim.errors import SpecsimError
from specsim.profiles import load_profile
from specsim.serve.profile_cost import ProfileStepCost
from specsim.serve.step_cost import step_ms

PROFILES = ("zoo-cpu-batch", "qwen2.5-coder-0.5b-1.5b-cpu-batch")


def _one_by_one(cost, batch, gamma, ctx, since):
    return np.array(
        [
            step_ms(
                cost,
                batch=batch,
                gamma=gamma,
                context_tokens=row,
                prefill_chunks=(),
                images=0,
                draft_prefill=False,
                since_admission=None if since is None else int(k),
            )
            for row, k in zip(ctx, since if since is not None else [None] * len(ctx), strict=True)
        ]
    )


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("gamma", [0, 1, 3, 5, 9])
def test_decode_steps_at_once_equal_step_by_step(profile, gamma):
    cost = ProfileStepCost.from_profile(load_profile(profile))
    rng = np.random.default_rng(gamma)
    for batch in cost.batched.batch_sizes:
        ctx = rng.integers(10, 400, size=(7, batch)).astype(np.int64)  # past the grid too (extrapolated)
        for since in (None, np.arange(7), np.arange(7) + (1 << 30)):
            try:
                slow = _one_by_one(cost, batch, gamma, ctx, since)
            except SpecsimError as err:  # rows the profile did not measure: the same refusal at once
                with pytest.raises(SpecsimError, match=re.escape(str(err))):
                    cost.decode_steps_ms(batch=batch, gamma=gamma, context_tokens=ctx, since_admission=since)
                continue
            fast = cost.decode_steps_ms(batch=batch, gamma=gamma, context_tokens=ctx, since_admission=since)
            assert np.array_equal(fast, slow), (profile, batch, gamma, since)


def test_a_batch_beyond_the_grid_is_refused_at_once():
    cost = ProfileStepCost.from_profile(load_profile("zoo-cpu-batch"))
    with pytest.raises(SpecsimError, match="batch"):
        cost.decode_steps_ms(batch=64, gamma=3, context_tokens=np.full((2, 64), 50))
