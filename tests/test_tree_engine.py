"""The token-tree engine: lossless (greedy token for token on Llama, Qwen2 and LLaVA; sampled by chi-square),
greedy tree replay from top-k traces equals its block counts, records."""

import numpy as np
import pytest
import torch
from scipy.stats import chi2, chisquare, ncx2

from calibrate.drafting import TextDrafter, TreeProposal, make_drafter, tree_drafting
from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace, target_reference
from calibrate.run.engine import Request, speculative_decode, target_decode
from calibrate.run.tree_engine import TreeDecodeResult, accept_sampled, tree_decode
from specsim.draft_shapes.tree_replay import replay_tree_blocks_per_prompt
from specsim.draft_shapes.trees import parse_tree
from specsim.errors import SpecsimError
from tests.tiny_pair import tiny_pair, tiny_prompts, tiny_zoo

torch.set_num_threads(1)
TREES = ("chain:3", "4,2,1", "2,2,2,2", "parents:0,0,1,1,3,3,5")
SIGNIFICANCE = 1e-3


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, noise=0.1)


def test_greedy_tree_equals_target_greedy_and_replay(pair):
    target, draft = pair
    reqs = [
        Request(ids, prompt_id=f"p{i}")
        for i, ids in enumerate(tiny_prompts(n=4, seed=1, min_len=1, max_len=14))
    ]
    pts = [acceptance_trace(target, draft, r, max_new_tokens=24, top_k=4) for r in reqs]
    traces = [pt.trace for pt in pts]
    blocks = 0
    for spec in TREES:
        tree = parse_tree(spec)
        runs = [
            tree_decode(target, tree_drafting(TextDrafter(draft)), r, tree=tree, max_new_tokens=24)
            for r in reqs
        ]
        blocks += sum(len(o.blocks) for o in runs)
        for out, pt in zip(runs, pts):
            assert out.tokens == pt.output_tokens, spec  # the target's greedy output (target_decode)
        np.testing.assert_array_equal(
            [len(o.blocks) for o in runs], replay_tree_blocks_per_prompt(traces, tree), err_msg=spec
        )
    assert (
        24 * len(reqs) * len(TREES) / blocks > 1.8
    )  # multi-token blocks are common: the comparison has power


def test_chain_tree_takes_the_chain_engines_blocks(pair):
    target, draft = pair
    req = Request(tiny_prompts(n=1, seed=3)[0])
    chain = speculative_decode(target, TextDrafter(draft), req, gamma=3, max_new_tokens=20)
    tree = tree_decode(target, tree_drafting(TextDrafter(draft)), req, tree="chain:3", max_new_tokens=20)
    assert [(b.gamma, b.accepted) for b in tree.blocks] == [(b.gamma, b.accepted) for b in chain.blocks]


def test_eos_and_records(pair):
    target, draft = pair
    req = Request(tiny_prompts(n=1, seed=4)[0], prompt_id="x")
    full = target_decode(target, req, max_new_tokens=20).tokens
    eos = full[9]
    out = tree_decode(
        target, tree_drafting(TextDrafter(draft)), req, tree="3,2", max_new_tokens=20, eos_token_id=eos
    )
    assert out.tokens == full[: full.index(eos) + 1]
    assert isinstance(out, TreeDecodeResult) and out.tree == "3,2" and out.gamma == 9
    for b in out.blocks:
        assert b.verify_ms > 0 and b.block_ms >= b.verify_ms + b.draft_ms - 1e-6
        assert b.accepted <= b.depth <= 2 and b.gamma <= 9 and b.draft_passes <= 2
    assert {"target_prefill_ms", "draft_generation_ms"} <= set(out.stage_ms())  # the draft prefill is fused
    assert TreeDecodeResult.from_json(out.to_json()) == out


def test_qwen2_tree_masks():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    target = Qwen2ForCausalLM(cfg).eval()
    draft = Qwen2ForCausalLM(cfg).eval()
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        draft.model.layers[1].mlp.down_proj.weight.mul_(0.7)
    req = Request(tiny_prompts(n=1, seed=6)[0])
    base = target_decode(target, req, max_new_tokens=16)
    out = tree_decode(target, tree_drafting(TextDrafter(draft)), req, tree="3,2,1", max_new_tokens=16)
    assert out.tokens == base.tokens and len(out.blocks) < 16


def test_zoo_llava_ensembles_are_lossless_and_replay_exactly():
    zoo = tiny_zoo()
    target, req = zoo["target"], zoo["requests"][2]
    kw = dict(max_new_tokens=12)
    ref = target_reference(target, req, **kw)
    tree = parse_tree("3,2")
    for method in ("M", "MT", "MTC"):
        mk = lambda m=method: make_drafter(m, zoo["draft"], tokenizer=zoo["tok"], captioner=zoo["captioner"])  # noqa: E731
        trace = drafter_trace(target, mk(), req, reference=ref, top_k=3, **kw).trace
        out = tree_decode(target, tree_drafting(mk()), req, tree=tree, **kw)
        assert out.tokens == ref.tokens, method
        assert len(out.blocks) == replay_tree_blocks_per_prompt([trace], tree)[0], method
    with pytest.raises(SpecsimError, match="adaptive"):
        tree_drafting(make_drafter("adaptive:MT", zoo["draft"], tokenizer=zoo["tok"]))


# --------------------------------------------------------------------------- sampling: losslessness
P = torch.tensor([[0.30, 0.25, 0.20, 0.10, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20, 0.20, 0.30]])
Q = torch.tensor([[0.10, 0.40, 0.10, 0.30, 0.05, 0.05], [0.30, 0.30, 0.10, 0.10, 0.10, 0.10]])


def _emitted_first_two(q_claimed, n, seed, spec="3,2"):
    """First two emitted tokens of many verified trees whose children are drawn i.i.d. from Q[depth];
    the target's rows are context-free (P[depth]), so token 1 ~ P[0] and token 2 ~ P[1]."""
    tree = parse_tree(spec)
    gen = torch.Generator().manual_seed(seed)
    depths = tree.depths
    logits = torch.log(P[np.minimum(depths, 1)])  # [n+1, V]
    expanded = tuple(u for level in tree.expanded_levels() for u in level)
    kids = tree.children()
    draws = {
        u: torch.multinomial(Q[depths[u]], n * len(kids[u]), replacement=True, generator=gen).view(n, -1)
        for u in expanded
    }  # children i.i.d. from the draft's q at their parent's depth
    q_rows = q_claimed[depths[list(expanded)]]
    first, second = np.empty(n, int), np.full(n, -1)
    for i in range(n):
        tokens = torch.zeros(tree.n + 1, dtype=torch.long)
        for u in expanded:
            tokens[kids[u]] = draws[u][i]
        prop = TreeProposal(
            tree=tree, tokens=tokens, q_probs=q_rows, expanded=expanded, model_ms=0.0, pass_rows=()
        )
        path, nxt = accept_sampled(logits, prop, 1.0, gen)
        emitted = [int(tokens[u]) for u in path] + [nxt]
        first[i] = emitted[0]
        if len(emitted) > 1:
            second[i] = emitted[1]
    return first, second


def _expected(n, p):
    p = p.double().numpy()
    return n * p / p.sum()


def test_chi_square_power_detects_a_two_percent_error():
    delta = np.zeros(6)
    delta[0], delta[1] = -0.02, 0.02  # 2 points between the two largest cells of P[0]
    nc = 20_000 * float(np.sum(delta**2 / P[0].numpy()))
    assert ncx2.sf(chi2.isf(SIGNIFICANCE, 5), 5, nc) > 0.99


def test_multi_candidate_verification_keeps_the_target_distribution():
    first, second = _emitted_first_two(Q, 20_000, seed=0)
    assert chisquare(np.bincount(first, minlength=6), _expected(first.size, P[0])).pvalue > SIGNIFICANCE
    s = second[second >= 0]
    assert s.size > 5_000  # the tree accepts often: the second-token test has data
    assert chisquare(np.bincount(s, minlength=6), _expected(s.size, P[1])).pvalue > SIGNIFICANCE


def test_wrong_q_breaks_multi_candidate_losslessness():
    first, _ = _emitted_first_two(torch.full((2, 6), 1 / 6), 5_000, seed=1)
    assert chisquare(np.bincount(first, minlength=6), _expected(5_000, P[0])).pvalue < SIGNIFICANCE


def test_sampled_tree_engine_end_to_end_matches_target_joint_distribution():
    target, draft = tiny_pair(seed=3, noise=0.3, vocab=8, init=0.6)
    ids = torch.tensor([[1, 5, 2]])
    with torch.no_grad():
        p1 = torch.softmax(target(ids).logits[0, -1], -1)  # [V]
        ext = torch.cat([ids.repeat(8, 1), torch.arange(8)[:, None]], 1)  # [V, 4]
        p2 = torch.softmax(target(ext).logits[:, -1], -1)  # [V, V]
    joint = (p1[:, None] * p2).flatten().double().numpy()
    joint /= joint.sum()
    gen = torch.Generator().manual_seed(0)
    n, counts, accepted = 700, np.zeros(64), 0
    for _ in range(n):
        out = tree_decode(
            target,
            tree_drafting(TextDrafter(draft)),
            Request(ids),
            tree="3,2",
            max_new_tokens=2,
            temperature=1.0,
            generator=gen,
        )
        counts[out.tokens[0] * 8 + out.tokens[1]] += 1
        accepted += out.blocks[0].accepted
    assert accepted > n / 4  # the draft's candidates are often accepted: the tree path is exercised
    keep = joint * n >= 5  # pool rare cells so the chi-square approximation holds
    obs = np.r_[counts[keep], counts[~keep].sum()]
    exp = np.r_[joint[keep], joint[~keep].sum()] * n
    assert chisquare(obs, exp).pvalue > SIGNIFICANCE
