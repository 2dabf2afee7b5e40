"""The library's entries check a caller's numbers as the CLI checks its flags: a bad value is one
SpecsimError naming it, never NaN, inf, an impossible speedup or a numpy traceback from deep inside."""

import re

import numpy as np
import pytest

from specsim import optimal_gamma, speedup
from specsim.errors import SpecsimError
from specsim.predict.prediction import predict
from specsim.profiles import load_profile

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "args, said",
    [
        ((100, 5, 0.05, 1.3), "tau: expected 1 <= tau <= gamma+1"),  # returned 64.5 on tau 100 at gamma 5
        ((-3, 5, 0.05, 1.3), "tau: expected 1 <= tau <= gamma+1"),
        ((NAN, 5, 0.05, 1.3), "tau: expected finite numbers"),
        ((3.6, 5, None, 1.3), "c: expected finite numbers"),
        ((3.6, 5, 0.05, INF), "v: expected finite numbers"),  # returned 0.0
        (("x", 5, 0.05, 1.3), "tau: expected finite numbers, got 'x'"),
    ],
)
def test_speedup_refuses_what_no_block_has(args, said):
    with pytest.raises(SpecsimError, match="^" + re.escape(said)):
        speedup(*args)
    assert speedup(3.6, 5, 0.05, 1.3) == pytest.approx(3.6 / 1.55)


@pytest.mark.parametrize(
    "kw, said",
    [
        ({"c": NAN}, "c: expected finite numbers"),  # returned (1, nan)
        ({"c": 0.05, "v_of_gamma": [NAN] * 16}, "v_of_gamma: expected finite numbers"),
        ({"c": 0.05, "gamma_max": 0}, "gamma_max: expected an integer in 1..1024"),  # numpy's empty argmax
        ({"c": 0.05, "gamma_max": 2.7}, "gamma_max: expected an integer in 1..1024"),  # cut to 2
        ({"c": 0.05, "gamma_max": 10**9}, "gamma_max: expected an integer in 1..1024"),  # named 'gamma'
    ],
)
def test_optimal_gamma_refuses_what_it_cannot_search(kw, said):
    with pytest.raises(SpecsimError, match="^" + re.escape(said)):
        optimal_gamma(0.8, **kw)
    assert optimal_gamma(0.8, 0.05)[0] == 8


@pytest.mark.parametrize("gamma", [5.0, "5", 2.5, None])
def test_predict_takes_an_integer_gamma_or_a_draft_shape(gamma):
    """5.0 and '5' were taken for a tree or policy (speedup None, a note about trees); 2.5 was cut to 2."""
    profile = load_profile()
    with pytest.raises(SpecsimError, match="^gamma: expected an integer >= 1"):
        predict(profile, gamma)
    assert predict(profile, np.int64(5))[0].speedup == predict(profile, 5)[0].speedup is not None


@pytest.mark.parametrize(
    "kw, said",
    [
        ({"new_tokens": 10**12}, "new_tokens: expected a value in 1..16777216"),  # tried 1.9 TiB
        ({"new_tokens": -1}, "new_tokens: expected a value in 1..16777216"),  # an IndexError
        ({"new_tokens": NAN}, "new_tokens: expected a value in 1..16777216"),
        ({"context_tokens": -600, "new_tokens": 100}, "context_tokens: expected a value in 0..16777216"),
        ({"context_tokens": NAN, "new_tokens": 100}, "context_tokens: expected a value in 0..16777216"),
        ({"max_new_tokens": "64"}, "max_new_tokens: expected a number of tokens"),
    ],
)
def test_predict_checks_the_request_sizes_it_is_given(kw, said):
    with pytest.raises(SpecsimError, match="^" + re.escape(said)):
        predict(load_profile("zoo-cpu"), 3, **kw)
