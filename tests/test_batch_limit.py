"""Where SD stops paying once memory is counted: the largest batch that fits (exact, against a search over
the per-GPU bytes and the plan's own ``fits`` flag) and what ``specsim hardware`` says about it."""

import json

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.hardware.batch_limit import StopPaying, crossover_batch, fitting_crossover
from specsim.hardware.device import load_device
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.parallel import largest_fitting_batch, per_gpu_resident_bytes
from specsim.hardware.plan import Parallel, plan_hardware
from specsim.predict.acceptance_source import MethodTau
from specsim.profile_format import MethodAcceptance

ENTRY = MethodAcceptance(method="M", scenario="s", images_per_prompt=0, gamma=4, tau=2.5)


def _search(target, draft, memory, context, tp, draft_tp, **kw) -> int:
    """The largest batch by walking up one at a time (a second implementation)."""
    b = 0
    while per_gpu_resident_bytes(target, draft, b + 1, context, tp, draft_tp, **kw) <= memory:
        b += 1
    return b


@pytest.mark.parametrize(
    ("tp", "draft_tp", "split", "shared", "context"),
    [
        (1, 1, "tensor", False, 1029),
        (2, 1, "tensor", False, 4096),
        (4, 4, "layer", False, 2048),
        (1, 1, "tensor", True, 8192),
    ],
)
def test_largest_fitting_batch_matches_a_search(tp, draft_tp, split, shared, context):
    target, draft = load_model_spec("llava-1.5-7b"), load_model_spec("llava-1.5-68m")
    memory = 0.9 * load_device("h100-sxm").memory_bytes
    kw = dict(shared_weights=shared, split=split)
    b = largest_fitting_batch(target, draft, memory, context, tp, draft_tp, **kw)
    assert b == _search(target, draft, memory, context, tp, draft_tp, **kw) and b > 0


def test_largest_fitting_batch_is_zero_when_the_weights_alone_do_not_fit():
    target, draft = load_model_spec("llava-1.5-7b"), load_model_spec("llava-1.5-68m")
    assert largest_fitting_batch(target, draft, 0.5 * target.weight_bytes, 1024, 1) == 0


def test_plan_row_at_the_largest_fitting_batch_is_the_last_that_fits():
    """The bound agrees with the plan's own per-row ``fits`` flag: B fits, B + 1 does not."""
    target, draft = load_model_spec("llava-1.5-7b"), load_model_spec("llava-1.5-68m")
    h100, mt = load_device("h100-sxm"), MethodTau.from_entry(ENTRY)
    for par in (Parallel(), Parallel(tp=2)):
        plan = plan_hardware(target, draft, [h100], [mt], batches=(1, 8), contexts=(1024,), parallel=par)
        limit = plan.crossover("h100-sxm", "M", 1024)
        b = limit.largest_fitting_batch
        around = plan_hardware(
            target, draft, [h100], [mt], batches=(b, b + 1), contexts=(1024,), parallel=par
        )
        at, past = sorted(around.rows, key=lambda r: r.batch_size)
        assert at.fits_memory and not past.fits_memory
        assert limit.speedup_at_largest_fitting == pytest.approx(at.speedup)
        assert plan.limit_rows[0].batch_size == b


class _Row:
    def __init__(self, batch_size, speedup):
        self.batch_size, self.speedup = batch_size, speedup


def _limit(speedups, fit, at_fit) -> StopPaying:
    rows = [_Row(b, s) for b, s in zip((1, 8, 64, 512), speedups)]
    return StopPaying.from_rows("gpu", "M", 1024, rows, fit, at_fit)


def test_memory_caps_first_when_sd_still_pays_at_the_largest_fitting_batch():
    limit = _limit([1.7, 1.6, 1.4, 0.9], 100, 1.3)  # stops at 512 on paper, but only 100 fit
    assert limit.stops_from == 512 and limit.memory_caps_first
    assert (
        "memory, not SD, caps the batch" in limit.sentence()
        and "so batch 512, from which it stops paying, is out of reach" in limit.sentence()
    )
    assert limit.fits_cell() == "B 100: 1.30x" and limit.cell() == "512"


def test_sd_stopping_before_memory_is_not_credited_to_memory():
    limit = _limit([1.7, 1.2, 0.9, 0.7], 1000, 0.6)
    assert limit.stops_from == 64 and not limit.memory_caps_first and limit.sentence() is None
    assert limit.cell() == "from 64"
    beyond = _limit([1.7, 1.6, 1.4, 1.1], 4000, 0.8)  # still pays at 512, not at 4000: the cell says so
    assert beyond.cell() == "4000" and not beyond.memory_caps_first
    assert "stops paying between B 512 (planned) and the largest batch that fits (B 4000" in beyond.sentence()


def test_never_paying_and_nothing_fitting_are_said_as_such():
    assert _limit([0.9, 0.8, 0.7, 0.6], 100, 0.5).cell() == "all"
    assert _limit([1.7, 1.6, 1.4, 1.1], 100, 1.2).cell() == "none"
    nothing = _limit([1.5, 1.4, 1.3, 1.2], 0, None)
    assert nothing.fits_cell() == "none" and "not even one sequence fits" in nothing.sentence()
    assert not nothing.memory_caps_first


def test_hardware_cli_says_memory_caps_the_llava_batch_at_1k(capsys):
    """The H100 LLaVA-1.5-7B/68M plan at 1k context: SD still pays where memory stops the batch."""
    args = "hardware --pair llava-1.5-7b-68m --device h100-sxm --batch 1,64,512 --context 1024".split()
    assert main(args + ["--runtime", "vllm"]) == 0
    text = capsys.readouterr().out
    assert "largest B that fits" in text and "memory, not SD, caps the batch here" in text
    assert main(args + ["--runtime", "vllm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    limit = out["plan"]["stop_paying"]["M"]["h100-sxm"]["1024"]
    assert limit["memory_caps_first"] and 64 < limit["largest_fitting_batch"] < 512
    assert limit["speedup_at_largest_fitting_batch"] > 1.0
    assert len(out["plan"]["rows_at_largest_fitting_batch"]) == 1


def _dips_then_recovers(b):
    """Pays below batch 50, loses from 50 to 1000, pays again beyond (as the KV-bound regime of huge batches
    can, past a device's memory)."""
    b = np.asarray(b, dtype=float)
    return np.where(b < 1000, 1.5 - b / 100, 1.001)


def test_the_crossover_is_solved_within_the_memory_when_sd_no_longer_pays_at_the_largest_fitting_batch():
    assert crossover_batch(_dips_then_recovers) is None  # on the whole axis SD pays at its end
    assert fitting_crossover(_dips_then_recovers, 130) == pytest.approx(50, rel=2e-3)
    assert fitting_crossover(_dips_then_recovers, 20) is None  # pays at the fit, and again past 1000
    assert fitting_crossover(_dips_then_recovers, None) is None  # no memory bound: the whole axis
    assert fitting_crossover(lambda b: 0.5 + 0.0 * np.asarray(b, dtype=float), 64) is None  # never pays


def test_the_crossover_is_exact_to_the_decimal_hardware_prints():
    """A crossing at exactly batch 100 (speedup 2 - B/100) on two search ranges: within 0.001 of 100 on both,
    so the one decimal printed does not depend on the range (bisected to 1e-3 relative, 100.02 and 100.03)."""
    for hi in (300.0, 4096.0):
        assert crossover_batch(lambda b: 2.0 - np.asarray(b, dtype=float) / 100, hi=hi) == pytest.approx(
            100.0, abs=1e-3
        )


def test_hardware_names_where_sd_stops_paying_whenever_it_loses_at_the_largest_batch_that_fits(capsys):
    """Every device x context of the default plan where SD pays at a planned batch but not at the largest
    batch that fits gets a crossover at or below that batch, with the planned rows on the right side of it
    (H20 at 1k context: its speedup comes back to 1 only at batches beyond its memory)."""
    assert main(["hardware", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    seen = 0
    for device, by_context in plan["stop_paying"]["M"].items():
        for context, limit in by_context.items():
            s_fit = limit["speedup_at_largest_fitting_batch"]
            if limit["pays_from_batch"] is None or s_fit is None or s_fit >= 1.0:
                continue
            seen += 1
            cross, fit = limit["crossover_batch"], limit["largest_fitting_batch"]
            assert cross is not None and 1 <= cross <= fit, (device, context, limit)
            rows = [r for r in plan["rows"] if (r["device"], str(r["context_tokens"])) == (device, context)]
            assert all(r["speedup"] < 1.0 for r in rows if cross < r["batch_size"] <= fit)
            assert all(r["speedup"] >= 1.0 for r in rows if r["batch_size"] < cross), (device, context)
    assert seen >= 1


def test_losing_at_every_shown_batch_but_paying_between_says_so():
    """Qwen3-30B-A3B at 4k (tp 4, expert parallel, batches 1, 8, 64): 'speedup<1 at B: all' stood beside a
    stop-paying batch of 42.6, where SD pays from 16 to 42 between the batches shown."""
    limit = StopPaying.from_rows(
        "gpu", "M", 4096, [_Row(1, 0.88), _Row(8, 0.93), _Row(64, 0.94)], 258, 0.72, crossover=42.6
    )
    assert limit.cell() == "all"
    assert "SD loses at every batch shown but pays between them, up to batch 42.6" in limit.sentence()
    never = StopPaying.from_rows("gpu", "M", 4096, [_Row(1, 0.9), _Row(8, 0.9)], 258, 0.7, crossover=None)
    assert never.sentence() is None or "pays between" not in never.sentence()
