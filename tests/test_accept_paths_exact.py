"""Sampled paths (``calibrate acceptance --sample-paths K``) keep one probability per position, not [N, V].

The traces need only r_t = min(1, q_t(y_t) / p_t(y_t)) along each path (ARCHITECTURE.md's symbol table), so
the path code gathers p_t(y_t) and q_t(y_t) as it goes (softmax a few positions at a time) instead of keeping
[N, V] distributions per path: on the 151k-token reference pair those were 39 MB per path and model at 64
tokens. The results must not change: they are compared bit for bit with a straightforward implementation (a
full softmax per path, then a gather), and the [N, V] softmaxes and stacks the path code builds are counted.
"""

import numpy as np
import pytest
import torch

from calibrate.drafting import TextDrafter
from calibrate.measure import acceptance_traces as A
from calibrate.measure.trace_fields import BETA_DECIMALS
from calibrate.run.engine import Request, target_decode
from tests.tiny_pair import tiny_pair, tiny_prompts

VOCAB, NEW = 300, 40  # 40 positions > PROB_ROWS: the row blocks are exercised
KW = {"max_new_tokens": NEW, "temperature": 0.7}


@pytest.fixture(scope="module")
def pair():
    target, draft = tiny_pair(seed=3, noise=0.2, vocab=VOCAB)
    req = Request(tiny_prompts(n=1, vocab=VOCAB, seed=4)[0], prompt_id="p")
    return target, draft, req, A.target_paths(target, req, paths=3, seed=9, **KW)


# --------------------------------------------------------------------------- the straightforward reference
def _full_probs(logits: torch.Tensor, tokens, temperature: float) -> torch.Tensor:
    """softmax over the whole [N, V] at once, then the tokens' column."""
    return torch.softmax(logits.float() / temperature, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _reference_p(target, req, seed: int, k: int) -> tuple[tuple[int, ...], torch.Tensor]:
    gen = torch.Generator().manual_seed(A.path_seed(seed, req.prompt_id, k))
    run = target_decode(target, req, generator=gen, **KW)
    ctx = torch.cat([req.input_ids[0], torch.tensor(run.tokens[:-1])])[None]
    return run.tokens, _full_probs(A.next_token_logits(target, ctx, NEW), run.tokens, KW["temperature"])


def _ratios(qy: torch.Tensor, py: torch.Tensor) -> tuple[float, ...]:
    r = torch.clamp(qy.double() / py.double().clamp_min(1e-300), 0.0, 1.0).numpy()
    return tuple(float(b) for b in np.round(r, BETA_DECIMALS))


def _reference_plain(draft, req, tokens, py) -> tuple[float, ...]:
    ctx = torch.cat([req.input_ids[0], torch.tensor(tokens[:-1])])[None]
    return _ratios(_full_probs(A.next_token_logits(draft, ctx, len(tokens)), tokens, KW["temperature"]), py)


def _reference_drafter(draft, req, tokens, py) -> tuple[float, ...]:
    drafter, gen = TextDrafter(draft), torch.Generator().manual_seed(0)
    drafter.prefill(req)
    qs = []
    for tok in tokens:  # q_t [V] of every position kept, as the code before did
        qs.append(drafter.propose(1, temperature=KW["temperature"], generator=gen).q_probs[0].float())
        drafter.accept(0, int(tok))
    return _ratios(torch.stack(qs).gather(1, torch.tensor(tokens)[:, None])[:, 0], py)


# --------------------------------------------------------------------------- equality
@pytest.mark.parametrize("rows", [1, 7, 16, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
def test_token_probs_equal_the_whole_softmax_bit_for_bit(rows, temperature):
    gen = torch.Generator().manual_seed(rows)
    logits = 8 * torch.randn(40, 5000, generator=gen)
    tokens = torch.randint(0, 5000, (40,), generator=gen).tolist()
    got = A.token_probs(logits, tokens, temperature, rows=rows)
    assert got.dtype == torch.float32 and torch.equal(got, _full_probs(logits, tokens, temperature))


def test_paths_equal_the_straightforward_reference_bit_for_bit(pair):
    target, draft, req, paths = pair
    for k, path in enumerate(paths):
        tokens, py = _reference_p(target, req, seed=9, k=k)
        assert path.tokens == tokens and len(tokens) == NEW
        assert torch.equal(path.p_token, py)
    plain = A.acceptance_trace(target, draft, req, paths=paths, **KW).trace
    via = A.drafter_trace(target, TextDrafter(draft), req, paths=paths, **KW).trace
    assert plain.accept_paths == tuple(_reference_plain(draft, req, p.tokens, p.p_token) for p in paths)
    assert via.accept_paths == tuple(_reference_drafter(draft, req, p.tokens, p.p_token) for p in paths)
    assert len({p for p in plain.accept_paths}) == 3  # three different paths, not one repeated


# --------------------------------------------------------------------------- no [N, V] per path
def _count_wide(monkeypatch) -> list:
    """Records the shape of every softmax or stack result with more than PROB_ROWS rows of the vocabulary."""
    wide = []
    for name in ("softmax", "stack"):
        real = getattr(torch, name)

        def spy(*a, _real=real, **k):
            out = _real(*a, **k)
            if out.dim() == 2 and out.shape[1] == VOCAB and out.shape[0] > A.PROB_ROWS:
                wide.append(tuple(out.shape))
            return out

        monkeypatch.setattr(torch, name, spy)
    return wide


def test_no_vocabulary_wide_tensor_per_path(pair, monkeypatch):
    """Before: one [N, V] softmax per path in target_paths and acceptance_trace, one [N, V] stack per path in
    drafter_trace. Now the paths add none to what the greedy trace needs."""
    target, draft, req, paths = pair
    wide = _count_wide(monkeypatch)
    A.target_paths(target, req, paths=3, seed=9, **KW)
    assert wide == []
    for trace in (
        lambda p: A.acceptance_trace(target, draft, req, paths=p, **KW),
        lambda p: A.drafter_trace(target, TextDrafter(draft), req, paths=p, **KW),
    ):
        wide.clear()
        trace(())
        greedy = list(wide)
        wide.clear()
        trace(paths)
        assert wide == greedy and greedy  # the greedy trace's own softmax is still seen: the spy works
