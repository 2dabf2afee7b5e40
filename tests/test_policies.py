"""Draft-length policies: parsing, HF's heuristic rule, the confidence stop, batch tables, exact replay."""

import numpy as np
import pytest

from specsim.acceptance.replay import replay_blocks_per_prompt
from specsim.draft_shapes.policies import (
    GammaPolicy,
    as_policy,
    parse_batch_ranges,
    parse_policy,
    replay_policy_blocks,
    replay_policy_blocks_per_prompt,
    replay_policy_tau,
)
from specsim.errors import SpecsimError
from specsim.profile_format import Trace
from tests.reference_block_cost import chain_block_ms, replay_policy_decode_ms


def _outcomes(blocks):
    return [(b.start, b.proposed, b.accepted) for b in blocks]


def test_parse_and_print():
    assert parse_policy("5") == parse_policy("fixed:5") == GammaPolicy(5) == as_policy(5)
    assert parse_policy("heuristic") == GammaPolicy(20, schedule="heuristic")  # HF's num_assistant_tokens
    assert parse_policy("heuristic:5,max=12") == GammaPolicy(5, schedule="heuristic", gamma_max=12)
    assert parse_policy("confidence:0.4") == GammaPolicy(20, stop_below=0.4)
    h = parse_policy("confidence:0.3,gamma=6,heuristic")
    assert h == GammaPolicy(6, schedule="heuristic", stop_below=0.3)
    b = parse_policy("batch:1=5,8=3,32=0@8")
    assert b.initial_state() == 3 and [b.gamma_at(n) for n in (1, 7, 8, 31, 32, 900)] == [5, 5, 3, 3, 0, 0]
    for p in (h, b, parse_policy("heuristic:5,max=12"), parse_policy("fixed:4")):
        assert parse_policy(str(p)) == p


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "fixed:0",
        "heuristic:x",
        "confidence",
        "confidence:1.5",
        "batch:2=3",
        "batch:1=2,1=3",
        "heuristic:5,max=2",
        "heuristic:5,foo=1",
        "sometimes",
    ],
)
def test_bad_policies_are_refused(bad):
    with pytest.raises(SpecsimError):
        parse_policy(bad)


def test_as_policy_names_gamma():
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(SpecsimError, match="gamma"):
            as_policy(bad)


def test_fixed_policy_replays_like_the_chain():
    rng = np.random.default_rng(0)
    matches = [rng.random(n) < 0.7 for n in (1, 5, 33, 80)]
    for g in (1, 3, 6):
        np.testing.assert_array_equal(
            replay_policy_blocks_per_prompt(matches, g), replay_blocks_per_prompt(matches, g)
        )


def test_heuristic_schedule_by_hand():
    # HF: +2 after a block that accepted every draft it proposed, else -1 (floor 1)
    match = np.array([1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1])
    blocks = replay_policy_blocks(match, parse_policy("heuristic:2"))
    assert _outcomes(blocks) == [(0, 2, 2), (3, 4, 3), (7, 3, 1), (9, 2, 0), (10, 1, 1)]
    capped = replay_policy_blocks(match, parse_policy("heuristic:2,max=3"))
    assert _outcomes(capped)[:2] == [(0, 2, 2), (3, 3, 3)]


def test_confidence_stop_by_hand():
    trace = Trace(
        match=(1,) * 8,
        draft_rank=(0,) * 8,
        draft_top_probs=tuple((p, 0.0) for p in (0.9, 0.4, 0.9, 0.9, 0.9, 0.3, 0.9, 0.9)),
    )
    blocks = replay_policy_blocks(trace, parse_policy("confidence:0.5,gamma=3"))
    assert _outcomes(blocks) == [(0, 2, 2), (3, 3, 3), (7, 0, 0)]  # the low draft itself is still proposed
    with pytest.raises(SpecsimError, match="top-k"):
        replay_policy_blocks(Trace(match=(1, 0)), parse_policy("confidence:0.5"))


def test_batch_table_can_turn_drafting_off():
    match = [np.array([1, 1, 0, 1, 1, 1])]
    assert replay_policy_blocks_per_prompt(match, parse_policy("batch:1=5,8=3,32=0@32")).tolist() == [6]
    assert replay_policy_tau(match, parse_policy("batch:1=5,8=2@8")) == pytest.approx(
        6 / 2
    )  # blocks at 0 and 3, each of 3 tokens


def test_policy_decode_ms_sums_block_costs():
    tq = lambda rows, ctx: 1.0  # noqa: E731
    tv = lambda rows, ctx: 10.0 + rows + 0.01 * ctx  # noqa: E731
    match = np.array([1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1])
    blocks = replay_policy_blocks(match, parse_policy("heuristic:2"))
    want = sum(
        chain_block_ms(b.proposed, target_ms=tv, draft_ms=tq, context_tokens=20 + b.start) for b in blocks
    )
    ms = replay_policy_decode_ms(
        [match], parse_policy("heuristic:2"), target_ms=tv, draft_ms=tq, prompt_tokens=20
    )
    assert ms.tolist() == pytest.approx([want])


def test_one_grammar_takes_both_spellings_of_gamma_by_batch():
    """The table spelling (``--policy batch:1=5,9=3``) and the ranges spelling (``serve --gamma-by-batch
    1-8:5,9-32:3``, vLLM's ``num_speculative_tokens_per_batch_size``) make one GammaPolicy; each spelling is
    accepted where the other used to be the only one."""
    table = parse_policy("batch:1=5,9=3,33=0")
    ranges = GammaPolicy(0, parse_batch_ranges("1-8:5,9-32:3"))
    assert [table.gamma_at(b) for b in range(1, 200)] == [ranges.gamma_at(b) for b in range(1, 200)]
    assert str(table) == str(ranges) == "batch:1=5,9=3,33=0@1"
    assert parse_policy("1-8:5,9-32:3") == ranges  # --policy takes the ranges spelling
    assert (
        GammaPolicy(0, parse_batch_ranges("batch:1=5,9=3,33=0")).table() == table.table()
    )  # serve takes the table
    serve = GammaPolicy(3, parse_batch_ranges("1-4:5,5-16:2"), off_from_batch=64)
    assert parse_policy(str(serve)).table() == serve.table() == ((1, 5), (5, 2), (17, 3), (64, 0))
    with pytest.raises(SpecsimError, match="no @B"):
        parse_batch_ranges("batch:1=5,8=3@8")
