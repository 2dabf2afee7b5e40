"""The speculative-decoding engine: lossless (greedy token for token; sampled by chi-square), records."""

import numpy as np
import pytest
import torch
from scipy.stats import chi2, chisquare, ncx2

from calibrate.drafting import TextDrafter
from calibrate.run.engine import Request, accept_phase, speculative_decode, target_decode
from calibrate.run.proposal import Drafter, Proposal
from specsim.errors import SpecsimError
from tests.tiny_pair import tiny_pair, tiny_prompts

torch.set_num_threads(1)
GAMMAS = (1, 2, 3, 5, 8)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, noise=0.05)


def test_text_drafter_implements_protocol(pair):
    assert isinstance(TextDrafter(pair[1]), Drafter)


def test_greedy_sd_equals_target_greedy_token_for_token(pair):
    target, draft = pair
    for ids in tiny_prompts(n=5, seed=1, min_len=1, max_len=14):  # S = 1 (no prefill) included
        req = Request(ids)
        base = target_decode(target, req, max_new_tokens=30)
        assert len(base.tokens) == 30 and base.tau == 1.0
        for gamma in GAMMAS:
            out = speculative_decode(target, TextDrafter(draft), req, gamma=gamma, max_new_tokens=30)
            assert out.tokens == base.tokens, f"gamma={gamma}"
            assert sum(b.emitted for b in out.blocks) == 30
            assert all(b.gamma <= gamma and 0 <= b.accepted <= b.gamma for b in out.blocks)
    assert out.tau > 1.2  # the noisy copy agrees often: the test exercises multi-token blocks


def test_eos_stops_both_decoders_identically(pair):
    target, draft = pair
    req = Request(tiny_prompts(n=1, seed=4)[0])
    full = target_decode(target, req, max_new_tokens=25).tokens
    eos = full[10]
    cut = full[: full.index(eos) + 1]
    assert target_decode(target, req, max_new_tokens=25, eos_token_id=eos).tokens == cut
    for gamma in (2, 6):
        out = speculative_decode(
            target, TextDrafter(draft), req, gamma=gamma, max_new_tokens=25, eos_token_id=[eos]
        )
        assert out.tokens == cut


def test_block_records_and_stage_times(pair):
    target, draft = pair
    prompt = tiny_prompts(1, seed=2)[0]
    out = speculative_decode(target, TextDrafter(draft), Request(prompt), gamma=4, max_new_tokens=20)
    stages = out.stage_ms()
    assert {"draft_generation_ms", "target_verification_ms", "overhead_ms"} <= set(stages)
    assert all(v >= 0 for v in stages.values())
    # The prefill is fused with the first block: its verify pass carries the prompt and its first
    # draft step the draft's prompt; later blocks feed 1 (or 2 after a full acceptance) + γ positions.
    first = out.blocks[0]
    assert (first.target_context_tokens, first.target_rows) == (0, prompt.shape[1] + first.gamma)
    assert (first.draft_context_tokens, first.draft_first_rows) == (0, prompt.shape[1])
    committed = prompt.shape[1] - 1
    for prev, b in zip(out.blocks, out.blocks[1:]):
        committed += prev.emitted
        assert (b.target_context_tokens, b.target_rows) == (committed, b.gamma + 1)
        full = prev.accepted == prev.gamma
        assert b.gamma == 0 or (b.draft_context_tokens, b.draft_first_rows) == (
            committed - int(full),
            1 + int(full),
        )
    for b in out.blocks:
        assert b.verify_ms > 0 and b.block_ms >= b.verify_ms + b.draft_ms - 1e-6
        assert (b.draft_ms > 0) == (b.gamma > 0)
        assert len(b.draft_step_ms) == b.gamma and sum(b.draft_step_ms) == pytest.approx(b.draft_ms)
    assert sum(out.accepted_histogram()) == len(out.blocks)
    assert out.tau == pytest.approx(20 / len(out.blocks))
    assert type(out).from_json(out.to_json()) == out


def test_bad_arguments(pair):
    target, draft = pair
    req = Request(torch.tensor([[1, 2, 3]]))
    with pytest.raises(SpecsimError, match="gamma"):
        speculative_decode(target, TextDrafter(draft), req, gamma=0, max_new_tokens=5)
    with pytest.raises(SpecsimError, match="max_new_tokens"):
        speculative_decode(target, TextDrafter(draft), req, gamma=2, max_new_tokens=0)
    with pytest.raises(SpecsimError, match="input_ids"):
        target_decode(target, Request(torch.tensor([[]], dtype=torch.long)), max_new_tokens=5)
    with pytest.raises(SpecsimError, match="temperature"):
        target_decode(target, req, max_new_tokens=5, temperature=-1.0)


# --------------------------------------------------------------------------- sampling: losslessness
P = torch.tensor(
    [
        [0.30, 0.25, 0.20, 0.10, 0.10, 0.05],
        [0.05, 0.10, 0.15, 0.20, 0.20, 0.30],
        [0.40, 0.10, 0.10, 0.10, 0.10, 0.20],
    ]
)
Q = torch.tensor([[0.10, 0.40, 0.10, 0.30, 0.05, 0.05], [0.30, 0.30, 0.10, 0.10, 0.10, 0.10]])
N_SAMPLES = 60_000
SIGNIFICANCE = 1e-3


def _expected(n, p):
    p = p.double().numpy()
    return n * p / p.sum()


def _emitted_first_two(q_claimed, n, seed):
    """First two emitted tokens of many verify steps with drafts ~ Q (context-free p rows)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.log(P)
    first, second = np.empty(n, int), np.empty(n, int)
    drafts_all = torch.stack(
        [torch.multinomial(Q[i], n, replacement=True, generator=gen) for i in range(2)], 1
    )
    for k in range(n):
        drafts = drafts_all[k]
        nacc, nxt = accept_phase(logits, Proposal(drafts, q_claimed, 0.0), 1.0, gen)
        emitted = drafts[:nacc].tolist() + [nxt]
        first[k] = emitted[0]
        second[k] = emitted[1] if len(emitted) > 1 else -1
    return first, second


def test_chi_square_power_detects_a_one_percent_error():
    # moving 1 percentage point between the two largest cells of P[0] (the hardest 1% error to see)
    delta = np.zeros(6)
    delta[0], delta[1] = -0.01, 0.01
    nc = N_SAMPLES * float(np.sum(delta**2 / P[0].numpy()))
    assert ncx2.sf(chi2.isf(SIGNIFICANCE, 5), 5, nc) > 0.99


def test_verification_keeps_the_target_distribution():
    first, second = _emitted_first_two(Q, N_SAMPLES, seed=0)
    counts = np.bincount(first, minlength=6)
    assert chisquare(counts, _expected(N_SAMPLES, P[0])).pvalue > SIGNIFICANCE
    # second token: given the first block did not stop early, position 2 is p[1] (context-free rows)
    s = second[second >= 0]
    assert chisquare(np.bincount(s, minlength=6), _expected(s.size, P[1])).pvalue > SIGNIFICANCE


def test_wrong_q_breaks_losslessness():
    # the same verifier told the wrong draft distribution must be caught by the same test
    uniform = torch.full((2, 6), 1 / 6)
    first, _ = _emitted_first_two(uniform, 20_000, seed=1)
    assert chisquare(np.bincount(first, minlength=6), _expected(20_000, P[0])).pvalue < SIGNIFICANCE


def test_sampled_engine_end_to_end_matches_target_joint_distribution():
    target, draft = tiny_pair(seed=3, noise=0.3, vocab=8, init=0.6)
    ids = torch.tensor([[1, 5, 2]])
    req, n = Request(ids), 1500
    with torch.no_grad():
        p1 = torch.softmax(target(ids).logits[0, -1], -1)  # [V]
        ext = torch.cat([ids.repeat(8, 1), torch.arange(8)[:, None]], 1)  # [V, 4]
        p2 = torch.softmax(target(ext).logits[:, -1], -1)  # [V, V]
    joint = (p1[:, None] * p2).flatten().double().numpy()
    joint /= joint.sum()
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(64)
    for _ in range(n):
        out = speculative_decode(
            target, TextDrafter(draft), req, gamma=3, max_new_tokens=2, temperature=1.0, generator=gen
        )
        counts[out.tokens[0] * 8 + out.tokens[1]] += 1
    keep = joint * n >= 5  # pool rare cells so the chi-square approximation holds
    obs = np.r_[counts[keep], counts[~keep].sum()]
    exp = np.r_[joint[keep], joint[~keep].sum()] * n
    assert chisquare(obs, exp).pvalue > SIGNIFICANCE
