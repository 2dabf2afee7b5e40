"""Token-tree and draft-length-policy walks (numpy only): plans equal greedy replay, a chain tree walks like
the chain, tree pricing equals part 1's block cost, the best-tree search follows the verification cost, and
the predict / sweep / hardware commands list chain, tree and policy side by side."""

import json

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.draft_shapes.draft_plans import policy_plan, tree_plan
from specsim.draft_shapes.policies import parse_policy
from specsim.draft_shapes.tree_replay import replay_tree_blocks
from specsim.draft_shapes.trees import parse_tree
from specsim.errors import SpecsimError
from specsim.predict.chain_costs import sd_request_cost
from specsim.predict.predict_drafts import best_tree_for, predict_draft
from specsim.predict.prediction import predict_entry
from specsim.predict.tree_costs import tree_request_cost
from specsim.profile_format import LatencySection, MethodAcceptance, Profile, Trace
from specsim.profile_format.cost_grid import make_grid
from specsim.profile_format.cost_model import CostModel, OverheadGrid, TreeCosts
from specsim.profiles import load_profile, save_profile
from tests.conftest import make_profile
from tests.reference_block_cost import replay_tree_decode_ms
from tests.test_costmodel import _cost_model

F_TARGET = lambda r, c: 10.0 + 2 * (r - 1) + 0.01 * c  # noqa: E731
F_DRAFT = lambda r, c, b: 1.0 + 0.05 * r + 0.05 * c  # noqa: E731  (equal rows and context slopes: see below)
CTX = (8.0, 512.0)


def _with_trees(cm: CostModel, f_target=F_TARGET, f_draft=F_DRAFT, max_n=24, max_rows=8) -> CostModel:
    """``cm`` plus tree grids from the same cost functions (no overhead)."""
    vr, dr = tuple(range(2, max_n + 2)), tuple(range(1, max_rows + 1))
    tree = TreeCosts(
        verify=make_grid(vr, CTX, (1,), [[[f_target(r, c)] for c in CTX] for r in vr]),
        draft=make_grid(dr, CTX, (1, 2), [[[f_draft(r, c, b) for b in (1, 2)] for c in CTX] for r in dr]),
        overhead_ms_per_block=OverheadGrid((1, max_n), (1, 2), ((0.0, 0.0), (0.0, 0.0))),
    )
    return CostModel(**{f: getattr(cm, f) for f in CostModel.__dataclass_fields__} | {"tree": tree})


def _traces(n=3, length=40, p=0.55, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ranks = np.minimum(rng.geometric(p, size=length) - 1, 30)
        top = np.sort(rng.dirichlet(np.ones(4), size=length), axis=1)[:, ::-1]
        out.append(
            Trace(
                match=tuple(int(r == 0) for r in ranks),
                prompt_id=f"p{i}",
                prompt_tokens=60 + 10 * i,
                draft_prompt_tokens=60 + 10 * i,
                draft_rank=tuple(int(r) for r in ranks),
                draft_top_probs=tuple(tuple(float(x) for x in row) for row in top),
            )
        )
    return tuple(out)


def _profile(cm=None, traces=None) -> tuple[Profile, MethodAcceptance]:
    cm = cm or _with_trees(_cost_model(f_target=F_TARGET, f_draft=F_DRAFT, max_gamma=8))
    entry = MethodAcceptance(method="plain", scenario="s", images_per_prompt=0, traces=traces or _traces())
    return Profile(
        provenance=make_profile().provenance, latency=LatencySection(cost_model=cm), acceptance=(entry,)
    ), entry


@pytest.mark.parametrize("spec", ["4,2,1", "chain:3", "2,2,2", "parents:0,0,1,1,3"])
def test_tree_plan_is_the_replayed_schedule(spec):
    tree = parse_tree(spec)
    for t in _traces(n=4, length=37, seed=2):
        plan = tree_plan(t.draft_rank, tree)
        blocks = replay_tree_blocks(t.draft_rank, tree)
        assert [s.start for s in plan.steps] == [b.start for b in blocks] and plan.tokens == 37
        assert [s.tree.n if s.tree else 0 for s in plan.steps] == [b.proposed for b in blocks]
        eos = tree_plan(
            t.draft_rank, tree, max_new_tokens=60
        )  # an EOS-cut trace drafts whole trees to its end
        assert eos.blocks == plan.blocks and all(s.tree is not None for s in eos.steps)


def test_root_rows_follow_unfed_leaves():
    # "2,1": nodes 1, 2 at depth 1 (node 1 has child 3, node 2 is a leaf), node 3 at depth 2
    tree = parse_tree("parents:0,0,1")
    plan = tree_plan(
        np.array([1, 0, 0, 0, 5, 0, 0]), tree
    )  # rank 1 -> node 2 (a leaf); then 0, 0 -> nodes 1, 3
    assert [(s.start, s.emitted, s.root_rows) for s in plan.steps] == [(0, 2, 1), (2, 3, 2), (5, 2, 2)]


def test_chain_tree_and_fixed_policy_walk_like_the_chain():
    prof, entry = _profile()
    for t in entry.traces:
        chain = greedy_plan(t.match, 3)
        fixed = policy_plan(t, parse_policy("fixed:3"))
        assert all(
            np.array_equal(getattr(chain, f), getattr(fixed, f)) for f in ("start", "drafts", "first_rows")
        )
        kw = {"target_prompt_tokens": t.prompt_tokens, "draft_prompt_tokens": t.prompt_tokens, "fused": False}
        a = sd_request_cost(GridPassCost(prof.latency.cost_model), chain, **kw)
        b = tree_request_cost(
            GridPassCost(prof.latency.cost_model), tree_plan(t.draft_rank, parse_tree("chain:3")), **kw
        )
        assert (a.draft_ms, a.verify_ms) == pytest.approx((b.draft_ms, b.verify_ms), rel=1e-12)
    assert predict_draft(prof, entry, parse_tree("chain:3")).speedup == pytest.approx(
        predict_entry(prof, entry, 3).speedup
    )


def test_tree_pricing_equals_the_block_cost_of_part_one():
    """A second implementation: trees.tree_block_ms over the replayed blocks (its root feeds 1 row one
    position later than a 2-row root; with equal rows and context slopes in the draft cost the two price it
    alike)."""
    prof, entry = _profile()
    for spec in ("4,2,1", "2,2,2", "parents:0,0,1,1,3"):
        tree = parse_tree(spec)
        for t in entry.traces:
            ours = tree_request_cost(
                GridPassCost(prof.latency.cost_model),
                tree_plan(t.draft_rank, tree),
                target_prompt_tokens=t.prompt_tokens,
                draft_prompt_tokens=t.prompt_tokens,
                fused=False,
            )
            theirs = replay_tree_decode_ms(
                [t],
                tree,
                target_ms=F_TARGET,
                draft_ms=lambda r, c: F_DRAFT(r, c, 1),
                prompt_tokens=t.prompt_tokens - 1,
            )[0]
            assert ours.total_ms == pytest.approx(theirs, rel=1e-9), spec


def test_best_tree_grows_when_verification_is_flat():
    steep = _with_trees(_cost_model(f_target=F_TARGET, max_gamma=8), f_target=lambda r, c: 10.0 + 6 * (r - 1))
    flat = _with_trees(
        _cost_model(f_target=F_TARGET, max_gamma=8),
        f_target=lambda r, c: 10.0 + 0.01 * (r - 1),
        f_draft=lambda r, c, b: 0.1,
    )
    sizes = {}
    for name, cm in (("steep", steep), ("flat", flat)):
        prof, entry = _profile(cm)
        choice, pred = best_tree_for(prof, entry)
        sizes[name] = choice.tree.n
        assert pred.draft.startswith("best tree:") and pred.speedup > 0 and choice.tree.n <= 24
    assert sizes["flat"] > sizes["steep"]


def test_errors_name_what_is_missing():
    prof, entry = _profile(_cost_model(max_gamma=8))
    with pytest.raises(SpecsimError, match="token-tree grids"):
        best_tree_for(prof, entry)
    assert "token-tree grids" in predict_draft(prof, entry, parse_tree("2,1")).note
    bare = MethodAcceptance(
        method="plain",
        scenario="s",
        images_per_prompt=0,
        traces=(Trace(match=(1,) * 30, prompt_id="a", prompt_tokens=9),),
    )
    with pytest.raises(SpecsimError, match="--top-k"):
        tree_plan(bare.traces[0], parse_tree("2,1"))
    assert predict_draft(prof, bare, parse_policy("heuristic:20")).speedup is None  # γ 20 is outside the grid


def test_tree_costs_round_trip_and_old_cost_models_load(tmp_path):
    cm = _with_trees(_cost_model(max_gamma=8))
    assert CostModel.from_json(json.loads(json.dumps(cm.to_json()))) == cm and cm.tree.max_nodes == 24
    data = json.loads(json.dumps(cm.to_json()))
    del data["tree"]
    assert CostModel.from_json(data).tree is None
    data = cm.to_json() | {"tree": cm.tree.to_json() | {"verify": {**cm.tree.verify.to_json(), "batch": [2]}}}
    with pytest.raises(SpecsimError, match="tree.verify"):
        CostModel.from_json(json.loads(json.dumps(data)))


def test_predict_and_sweep_list_chain_tree_and_policy(tmp_path, capsys):
    prof, _ = _profile()
    path = save_profile(prof, tmp_path / "p.json")
    assert load_profile(str(path)).latency.cost_model.tree is not None
    args = ["--profile", str(path), "--tree", "4,2,1", "--policy", "heuristic:2,max=6"]
    assert main(["predict", "--gamma", "3", *args, "--best-tree"]) == 0
    out = capsys.readouterr().out
    assert "chain vs token tree" in out and "tree:4,2,1" in out and "policy:heuristic:2,max=6" in out
    assert "best tree:" in out and "γ = 3" in out and "best γ" not in out  # the best of one γ is that γ
    assert main(["sweep", "--gamma", "1-6", *args]) == 0
    assert "best γ = " in capsys.readouterr().out
    assert main(["sweep", "--gamma", "1-6", *args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["drafts"][0]
    assert row["best_chain"]["gamma"] in range(1, 7) and row["best_tree"]["draft"].startswith("best tree:")
    assert [d["draft"] for d in row["drafts"]] == ["tree:4,2,1", "policy:heuristic:2,max=6"]
    assert all(d["speedup"] > 0 for d in row["drafts"])
    assert main(["predict", "--gamma", "3", "--profile", str(path), "--tree", "8,8,8,8,8"]) == 2
    assert "tree" in capsys.readouterr().err


def test_hardware_picks_smaller_trees_where_verification_is_compute_bound(capsys):
    from specsim.draft_shapes.tree_replay import TreeMethod
    from specsim.draft_shapes.trees import rank_acceptance_iid
    from specsim.hardware.device import load_device
    from specsim.hardware.model_resolution import load_model_spec
    from specsim.hardware.runtime import load_runtime
    from specsim.hardware.tree_plan import plan_trees
    from specsim.presets import preset_names

    if "llava-1.5-7b" not in preset_names():
        pytest.skip("calibrate presets not installed")
    target, draft = load_model_spec("llava-1.5-7b"), load_model_spec("llava-1.5-68m")
    method = TreeMethod("iid", rank_acceptance_iid(0.6, 8))
    devices = [load_device("h100-sxm"), load_device("l4")]
    rows = plan_trees(
        target,
        draft,
        devices,
        [method],
        efficiency=load_runtime("vllm"),
        batches=(1, 64),
        contexts=(1024,),
        n_max=32,
    )
    by = {(r.device, r.batch_size): r for r in rows}
    assert len(rows) == 4 and all(r.speedup >= r.chain_speedup for r in rows)  # chains are candidates
    # at batch 64 the verification turns compute-bound: each node costs, so the best tree shrinks
    assert by[("h100-sxm", 64)].nodes < by[("h100-sxm", 1)].nodes
    assert (
        main(
            [
                "hardware",
                "--pair",
                "llava-1.5-7b-68m",
                "--alpha",
                "0.6",
                "--trees",
                "--device",
                "h100-sxm",
                "--batch",
                "1,8",
                "--context",
                "1024",
                "--tree-max-nodes",
                "16",
            ]
        )
        == 0
    )
    assert "best tree speedup" in capsys.readouterr().out


def test_a_best_tree_beaten_in_its_own_table_says_why(capsys):
    """The search picks a tree by per-rank acceptance at the mean context; the table walks the traces, where
    another listed run can price higher (zoo-cpu's T: 'best tree:2' 0.95x under tree:chain:2's 0.98x)."""
    argv = "predict --profile zoo-cpu --gamma 2 --tree chain:2 --best-tree --scenario zoo-1img --method T"
    assert main([*argv.split(), "--json"]) == 0
    (cmp,) = json.loads(capsys.readouterr().out)["drafts"]
    chain = next(d for d in cmp["drafts"] if d["draft"] == "tree:chain:2")
    assert chain["speedup"] > cmp["best_tree"]["speedup"]  # the case this test is about
    assert main(argv.split()) == 0
    lines = capsys.readouterr().out.splitlines()
    note = next(x for x in lines if x.startswith("note: best tree (T, zoo-1img)"))
    assert "tree:chain:2" in note and "price higher" in note


def test_a_comparison_with_trees_says_they_are_priced_on_the_tree_grids(tmp_path, capsys):
    """tree:chain:3 and γ = 3 are one shape priced on two engines' grids (the tree engine's and the chain
    engine's, measured apart): a comparison that lists both says so; one with policies only does not."""
    path = save_profile(_profile()[0], tmp_path / "p.json")
    note = "note: tree rows, tree:chain:G included, are priced on the profile's tree grids"
    assert main(["predict", "--gamma", "3", "--profile", str(path), "--tree", "chain:3"]) == 0
    assert note in capsys.readouterr().out
    assert main(["predict", "--gamma", "3", "--profile", str(path), "--policy", "fixed:3"]) == 0
    assert note not in capsys.readouterr().out
