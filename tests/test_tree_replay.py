"""Greedy tree replay from top-k traces (vs the chain replay, a block-by-block walk and the closed form),
per-rank acceptance, replayed cost; the Trace's top-k fields."""

import json

import numpy as np
import pytest

from specsim.acceptance.replay import replay_blocks_per_prompt
from specsim.draft_shapes.tree_replay import (
    rank_acceptance,
    replay_tree_blocks,
    replay_tree_blocks_per_prompt,
    replay_tree_tau,
)
from specsim.draft_shapes.trees import chain_tree, expected_tokens, parse_tree, rank_acceptance_iid
from specsim.errors import SpecsimError
from specsim.profile_format import Trace
from tests.reference_block_cost import chain_block_ms, replay_tree_decode_ms


def _geometric_ranks(rng, alpha, size):
    return rng.geometric(alpha, size=size) - 1  # P(rank r) = (1-α)^r α


def _walk(ranks, tree):
    """Second implementation: one block at a time, one node at a time."""
    kids, blocks, t, n = tree.children(), 0, 0, len(ranks)
    while t < n:
        node, acc = 0, 0
        while t + acc <= n - 2 and ranks[t + acc] < len(kids[node]):
            node = kids[node][ranks[t + acc]]
            acc += 1
        blocks += 1
        t += acc + 1
    return blocks


def test_chain_tree_replays_like_the_chain():
    rng = np.random.default_rng(0)
    ranks = [_geometric_ranks(rng, 0.6, n) for n in (1, 7, 40, 65)]
    for g in (1, 2, 3, 5, 8):
        np.testing.assert_array_equal(
            replay_tree_blocks_per_prompt(ranks, chain_tree(g)),
            replay_blocks_per_prompt([r == 0 for r in ranks], g),
        )


def test_tree_replay_equals_a_block_by_block_walk():
    rng = np.random.default_rng(1)
    for spec in ("4,2,1", "2,2,2,2", "parents:0,0,1,2,2,0,5", "3"):
        tree = parse_tree(spec)
        for n in (1, 2, 9, 50):
            r = _geometric_ranks(rng, 0.5, n)
            assert len(replay_tree_blocks(r, tree)) == _walk(r, tree), (spec, n)
    blocks = replay_tree_blocks(np.array([1, 0, 0, 3, 0]), parse_tree("2,1"))
    assert [(b.start, b.accepted, b.proposed) for b in blocks] == [(0, 2, 4), (3, 0, 2), (4, 0, 0)]


def test_replay_tau_approaches_the_closed_form_on_iid_ranks():
    rng = np.random.default_rng(2)
    alpha = 0.55
    ranks = [_geometric_ranks(rng, alpha, 20_000)]
    for spec in ("3,2,1", "2,2,2"):
        tree = parse_tree(spec)
        want = expected_tokens(tree, rank_acceptance_iid(alpha, 3)[0])
        assert replay_tree_tau(ranks, tree) == pytest.approx(want, rel=0.02)


def test_rank_acceptance_counts_ranks():
    acc = rank_acceptance([np.array([0, 0, 1, 5]), np.array([2, 0])], 3)
    np.testing.assert_allclose(acc, [[3 / 6, 1 / 6, 1 / 6]])
    with pytest.raises(SpecsimError, match="draft_rank"):
        rank_acceptance([Trace(match=(1, 0))], 2)


def test_replayed_decode_ms_charges_each_block_at_its_context():
    tq = lambda rows, ctx: 1.0 * rows  # noqa: E731
    tv = lambda rows, ctx: 10.0 + rows + 0.1 * ctx  # noqa: E731
    ranks = np.array([0, 0, 1, 0])  # chain:2 -> blocks at 0 (accepts 2) and 3 (the last token: a target step)
    ms = replay_tree_decode_ms([ranks], chain_tree(2), target_ms=tv, draft_ms=tq, prompt_tokens=50)
    want = chain_block_ms(2, target_ms=tv, draft_ms=tq, context_tokens=50) + tv(1, 53)
    assert ms.tolist() == pytest.approx([want])


# --------------------------------------------------------------------------- the profile's trace fields
def test_trace_top_k_fields_round_trip_and_old_traces_load():
    d = {
        "prompt_id": "p",
        "match": [1, 0, 0],
        "beta": [0.9, 0.2, 0.1],
        "draft_rank": [0, 2, 7],
        "draft_top_probs": [[0.8, 0.1], [0.5, 0.3], [0.4, 0.4]],
    }
    t = Trace.from_json(d, "t")
    assert t.draft_rank == (0, 2, 7) and t.draft_top_probs[1] == (0.5, 0.3)
    assert Trace.from_json(json.loads(json.dumps(t.to_json())), "t") == t
    old = Trace.from_json({"match": [1, 0], "beta": [0.5, 0.5]}, "t")
    assert old.draft_rank is None and "draft_rank" not in old.to_json()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"draft_rank": [0, 1]}, r"draft_rank: expected one per position"),
        ({"draft_rank": [1, 2, 7]}, r"draft_rank\[0\]: rank 1 contradicts match"),
        ({"draft_rank": [0, -1, 2]}, r"draft_rank\[1\]"),
        ({"draft_top_probs": [[0.8, 0.1], [0.5, 0.3]]}, r"draft_top_probs: expected one row"),
        (
            {"draft_top_probs": [[0.1, 0.8], [0.5, 0.3], [0.4, 0.4]]},
            r"draft_top_probs\[0\]: expected 2 decreasing",
        ),
        ({"draft_top_probs": [[0.8, 0.1], [0.5], [0.4, 0.4]]}, r"draft_top_probs\[1\]"),
        ({"draft_top_probs": [[0.8, 0.1], [0.5, 0.3], [1.4, 0.4]]}, r"draft_top_probs\[2\]\[0\]"),
    ],
)
def test_trace_top_k_errors_name_the_field(change, field):
    d = {"match": [1, 0, 0], "draft_rank": [0, 2, 7], "draft_top_probs": [[0.8, 0.1], [0.5, 0.3], [0.4, 0.4]]}
    with pytest.raises(SpecsimError, match=field):
        Trace.from_json(d | change, "acceptance[0].traces[0]")
