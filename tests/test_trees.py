"""Token trees: spec format, expected tokens (vs Monte Carlo and the chain's closed form), the Sequoia-style
dynamic programme (vs brute force over every tree), block cost."""

import itertools
import json

import numpy as np
import pytest

from specsim.acceptance.montecarlo import simulate_tree_tokens
from specsim.acceptance.theory import tau_iid
from specsim.draft_shapes.tree_search import best_tree, optimal_trees
from specsim.draft_shapes.trees import (
    TreeSpec,
    branching_tree,
    chain_tree,
    draft_pass_rows,
    expected_tokens,
    node_probabilities,
    parse_tree,
    rank_acceptance_iid,
)
from specsim.errors import SpecsimError
from tests.reference_block_cost import chain_block_ms, tree_block_ms


# --------------------------------------------------------------------------- spec format
def test_parse_forms_and_structure():
    t = parse_tree("4,2,1")
    assert t.n == 4 + 8 + 8 and t.depth == 3 and str(t) == "4,2,1"
    assert draft_pass_rows(t) == [1, 4, 8]  # leaves are not fed
    assert t.ranks[1:5].tolist() == [0, 1, 2, 3] and t.depths[-1] == 3
    assert parse_tree("chain:3") == parse_tree("1,1,1") == chain_tree(3) == TreeSpec((0, 1, 2))
    assert str(chain_tree(3)) == "chain:3"
    p = parse_tree("parents:0,0,1,1,3")
    assert (
        p.children()[1] == [3, 4] and p.ranks.tolist() == [0, 0, 1, 0, 1, 0] and str(p) == "parents:0,0,1,1,3"
    )
    anc = p.ancestors()
    assert anc[5].tolist() == [True, True, False, True, False, True]  # 5 -> 3 -> 1 -> 0
    assert TreeSpec.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert parse_tree(str(branching_tree((3, 2)))) == branching_tree((3, 2))


def test_truncation_keeps_shallow_nodes():
    t = parse_tree("2,2,2")
    assert t.truncated(3) is t and t.truncated(0) is None
    cut = t.truncated(1)
    assert cut == parse_tree("2") and t.truncated(2) == parse_tree("2,2")
    deep = parse_tree("parents:0,1,0,2")  # node numbering is not breadth-first
    assert deep.truncated(1) == TreeSpec((0, 0))


@pytest.mark.parametrize("bad", ["", "4,0", "chain:0", "parents:1", "parents:0,2", "x:1", "4,a", "9,9,9,9"])
def test_bad_specs_name_the_problem(bad):
    with pytest.raises(SpecsimError, match="tree"):
        parse_tree(bad)


# --------------------------------------------------------------------------- expected tokens
def test_chain_tree_equals_the_iid_closed_form_vectorised():
    alphas = np.array([0.0, 0.3, 0.8, 1.0])
    for g in (1, 4, 7):
        np.testing.assert_allclose(
            expected_tokens(chain_tree(g), alphas[:, None, None]), tau_iid(alphas, g), rtol=1e-12
        )


def test_acceptance_validation():
    with pytest.raises(SpecsimError, match="sum to <= 1"):
        expected_tokens(parse_tree("2"), [0.7, 0.5])
    with pytest.raises(SpecsimError, match="rank 2"):
        expected_tokens(parse_tree("3"), [0.5, 0.2])
    with pytest.raises(SpecsimError, match="probabilities"):
        expected_tokens(parse_tree("1"), [1.5])


def test_expected_tokens_matches_monte_carlo():
    rng = np.random.default_rng(0)
    acc = np.array([[0.5, 0.2, 0.1], [0.4, 0.3, 0.05], [0.6, 0.1, 0.1]])  # depth-dependent
    for spec in ("3,2,1", "parents:0,0,1,1,2,3,4,5", "2,2,2,2"):
        tree = parse_tree(spec)
        tokens = simulate_tree_tokens(tree, acc, rng=rng, blocks=200_000)
        se = tokens.std() / np.sqrt(tokens.size)
        assert abs(expected_tokens(tree, acc) - tokens.mean()) < 4 * se, spec
    assert simulate_tree_tokens(parse_tree("2,1"), [[1.0, 0.0]], rng=rng, blocks=10).tolist() == [3] * 10


def test_node_probabilities_batch_axes():
    tree = parse_tree("2,1")
    acc = rank_acceptance_iid(np.array([0.2, 0.9]), 2)  # (batch 2, depth 1, rank 2)
    probs = node_probabilities(tree, acc)
    assert probs.shape == (2, tree.n + 1)
    for i, a in enumerate((0.2, 0.9)):
        np.testing.assert_allclose(probs[i], node_probabilities(tree, rank_acceptance_iid(a, 2)[0]))


# --------------------------------------------------------------------------- optimal trees
def _plane_trees(n):
    """Every ordered tree with n nodes below the root, as parent lists (depth-first numbering)."""
    if n == 0:
        yield []
        return
    for first in range(1, n + 1):  # the first child's subtree has `first` nodes, the rest hang off the root
        for sub in _plane_trees(first - 1):
            for rest in _plane_trees(n - first):
                # first child = node 1, its subtree nodes 2..first; the rest shifted by `first`
                parents = [0] + [p + 1 for p in sub] + [0 if p == 0 else p + first for p in rest]
                yield parents


def test_dynamic_programme_equals_brute_force():
    rng = np.random.default_rng(1)
    for trial in range(3):
        raw = rng.dirichlet(np.ones(4), size=3)[:, :3]  # 3 depths x 3 ranks, rows sum < 1
        for max_depth in (None, 2):
            best = optimal_trees(raw, 7, max_depth=max_depth)
            for n in range(1, 8):
                trees = [TreeSpec(tuple(p)) for p in _plane_trees(n)]
                trees = [
                    t for t in trees if t.ranks.max() < 3 and (max_depth is None or t.depth <= max_depth)
                ]
                brute = max(expected_tokens(t, raw) for t in trees)
                assert best[n - 1].tau == pytest.approx(brute, abs=1e-12), (trial, max_depth, n)
                assert best[n - 1].tree.n == n and best[n - 1].tau == pytest.approx(
                    expected_tokens(best[n - 1].tree, raw)
                )
    assert sum(1 for _ in _plane_trees(5)) == 42  # Catalan(5): the enumeration is complete


def test_single_rank_acceptance_gives_chains():
    for c in optimal_trees([0.8], 6):
        assert c.tree == chain_tree(c.tree.n)


def test_best_tree_for_a_cost_equals_brute_force():
    acc = rank_acceptance_iid(0.6, 3)[0]

    def cost(tree):  # grows with nodes and with depth (draft passes)
        return 1.0 + 0.08 * tree.n + 0.25 * tree.depth

    choice = best_tree(acc, 6, cost)
    everything = [TreeSpec(tuple(p)) for n in range(1, 7) for p in _plane_trees(n)]
    everything = [t for t in everything if t.ranks.max() < 3]
    brute = max(expected_tokens(t, acc) / cost(t) for t in everything)
    assert choice.tokens_per_ms == pytest.approx(brute, rel=1e-12)
    with pytest.raises(SpecsimError, match="n_max"):
        optimal_trees(acc, 0)


# --------------------------------------------------------------------------- cost
def test_block_cost_of_chain_and_tree():
    tq = lambda rows, ctx: 1.0 + 0.1 * rows + 0.001 * ctx  # noqa: E731
    tv = lambda rows, ctx: 10.0 + 0.5 * rows + 0.01 * ctx  # noqa: E731
    g, ctx = 4, 100
    want = sum(tq(1, ctx + i) for i in range(g)) + tv(g + 1, ctx)
    assert chain_block_ms(g, target_ms=tv, draft_ms=tq, context_tokens=ctx) == pytest.approx(want)
    assert chain_block_ms(0, target_ms=tv, draft_ms=tq, context_tokens=ctx) == pytest.approx(tv(1, ctx))
    t = parse_tree("3,2")  # passes: root (1 row), 3 depth-1 nodes; target over 1 + 3 + 6 rows
    assert tree_block_ms(t, target_ms=tv, draft_ms=tq, context_tokens=ctx) == pytest.approx(
        tq(1, ctx) + tq(3, ctx + 1) + tv(10, ctx)
    )


def test_brute_force_enumeration_is_distinct():
    trees = {tuple(p) for p in _plane_trees(4)}
    assert len(trees) == 14 and all(TreeSpec(t).n == 4 for t in trees)
    assert len({str(TreeSpec(t)) for t in trees}) == 14
    assert list(itertools.islice(_plane_trees(1), 2)) == [[0]]
