"""The argparse types of `specsim.bounds`: `interval_arg`'s open and closed ends, NaN and text refused with
the expected range and the (clipped) bad text; serving's rate, burstiness and alpha are instances of it."""

import argparse

import pytest

from specsim.bounds import interval_arg
from specsim.serve.arrivals import burstiness_arg, rate_arg
from specsim.serve.speculation import alpha_arg


@pytest.mark.parametrize(
    "lo_open, hi_open, ok, bad",
    [
        (False, False, ["0", "1", "0.5"], ["-0.1", "1.01", "nan", "inf", "x"]),
        (True, False, ["1", "1e-9"], ["0"]),
        (False, True, ["0", "0.999"], ["1"]),
    ],
)
def test_interval_ends(lo_open, hi_open, ok, bad):
    parse = interval_arg(0.0, 1.0, "a share", lo_open=lo_open, hi_open=hi_open)
    for text in ok:
        assert parse(text) == float(text)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected a share, got '{text}'"):
            parse(text)


def test_serving_types_keep_their_messages():
    assert rate_arg("4") == 4.0 and burstiness_arg("1") == 1.0 and alpha_arg("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match=r"per second in \[1e-06, 1e\+06\], got '0'"):
        rate_arg("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"Gamma shape in \[0.001, 1000\]"):
        burstiness_arg("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"0 <= alpha < 1, got 'x{57}\.\.\.'"):
        alpha_arg("x" * 100)
