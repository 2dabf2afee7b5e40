"""Teacher-forced traces: replay of the trace reproduces the real greedy engine exactly; prompt sets."""

import json

import numpy as np
import pytest
import torch

from calibrate.drafting import TextDrafter
from calibrate.measure.acceptance_traces import acceptance_entry, acceptance_trace
from calibrate.measure.trace_fields import trace_from_logits
from calibrate.run.engine import Request, speculative_decode
from calibrate.workload.prompt_sets import Prompt, builtin_sets, load_prompts
from specsim.acceptance.replay import replay_blocks_per_prompt, replay_histogram, replay_traces_tau
from specsim.errors import SpecsimError
from specsim.profile_format import MethodAcceptance, Profile, Provenance
from tests.tiny_pair import tiny_pair, tiny_prompts

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def traced():
    target, draft = tiny_pair(seed=0, noise=0.05)
    reqs = [Request(ids, prompt_id=f"p{i}") for i, ids in enumerate(tiny_prompts(n=6, seed=5))]
    traces = [acceptance_trace(target, draft, r, max_new_tokens=32) for r in reqs]
    return target, draft, reqs, traces


def test_trace_shape_and_ranges(traced):
    *_, traces = traced
    for t in traces:
        assert len(t.trace.match) == len(t.trace.beta) == len(t.output_tokens) == 32
        assert all(0.0 <= b <= 1.0 for b in t.trace.beta)
    match = np.concatenate([t.trace.match for t in traces])
    beta = np.concatenate([t.trace.beta for t in traces])
    assert 0.2 < match.mean() < 0.95  # informative: neither all accepted nor all rejected
    # a greedy match needs the draft to put mass on the target's token: beta is higher where it matches
    assert beta[match == 1].mean() > beta[match == 0].mean()


def test_replay_equals_real_engine_for_every_prompt_and_gamma(traced):
    target, draft, reqs, traces = traced
    for gamma in (1, 2, 3, 4, 6, 8):
        engine_blocks, engine_hist = [], np.zeros(gamma + 1, int)
        for req, pt in zip(reqs, traces):
            out = speculative_decode(target, TextDrafter(draft), req, gamma=gamma, max_new_tokens=32)
            assert out.tokens == pt.output_tokens
            engine_blocks.append(len(out.blocks))
            engine_hist += np.array(out.accepted_histogram())
        raw = [pt.trace for pt in traces]
        np.testing.assert_array_equal(
            replay_blocks_per_prompt(raw, gamma), engine_blocks, err_msg=f"gamma={gamma}"
        )
        np.testing.assert_array_equal(replay_histogram(raw, gamma), engine_hist)
        assert replay_traces_tau(raw, gamma) == pytest.approx(32 * len(reqs) / sum(engine_blocks))


def test_entry_round_trips_through_a_profile(traced):
    *_, traces = traced
    entry = acceptance_entry(traces, method="plain", scenario="tiny", reference_gamma=5)
    assert entry.tau == pytest.approx(replay_traces_tau(entry.traces, 5))
    assert len(entry.accepted_histogram) == 6 and entry.target_prompt_tokens > 0
    prof = Profile(
        provenance=Provenance(
            target="t",
            draft="d",
            device="cpu",
            dtype="float32",
            date="2026-01-01",
            source="measured",
            weights="random",
        ),
        acceptance=(entry,),
    )
    back = Profile.from_json(json.loads(json.dumps(prof.to_json())))
    assert back.acceptance[0] == entry
    with pytest.raises(SpecsimError, match="at least one"):
        acceptance_entry([], method="plain", scenario="x")
    assert isinstance(entry, MethodAcceptance)


def test_vocab_mismatch_is_refused():
    with pytest.raises(SpecsimError, match="vocabulary"):
        trace_from_logits(torch.zeros(3, 10), torch.zeros(3, 12), torch.zeros(3, dtype=torch.long))


# --------------------------------------------------------------------------- prompt sets
def test_builtin_reference_set():
    assert "reference" in builtin_sets()
    prompts = load_prompts("reference")
    assert len(prompts) >= 12
    assert {p.task for p in prompts} == {"coding", "explanation"}
    lengths = [len(p.text) for p in prompts]
    assert max(lengths) > 3 * min(lengths)  # varied lengths
    assert len({p.id for p in prompts}) == len(prompts)
    assert load_prompts("reference", limit=3) == prompts[:3]


def test_jsonl_file_and_errors(tmp_path):
    good = tmp_path / "set.jsonl"
    good.write_text('{"id": "a", "prompt": "hi", "images": ["x.png"], "task": "vqa"}\n\n{"prompt": "two"}\n')
    (tmp_path / "x.png").write_bytes(b"")  # image paths are checked at load (they must be regular files)
    a, b = load_prompts(str(good))
    assert a == Prompt(id="a", text="hi", task="vqa", images=(str(tmp_path / "x.png"),), images_per_prompt=1)
    assert b.id == "3" and b.images == ()
    cases = {
        "": "empty",
        '{"prompt": ""}': "non-empty",
        '{"prompt": "x", "img": 1}': "unknown field",
        "{not json": "not valid JSON",
        '{"prompt": "x", "images_per_prompt": -1}': "images_per_prompt",
        '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}': "duplicate",
    }
    for text, msg in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(SpecsimError, match=msg):
            load_prompts(str(bad))
    with pytest.raises(SpecsimError, match="not found"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_top_k_fields_rank_ties_like_argmax():
    from calibrate.measure.trace_fields import top_k_fields

    q = torch.tensor([[0.4, 0.4, 0.2], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
    y = torch.tensor([1, 0, 2])
    f = top_k_fields(q, y, 2)
    assert f["draft_rank"] == (
        1,
        2,
        0,
    )  # an equally likely token with a smaller id ranks first, as argmax picks it
    assert [int(torch.argmax(r)) == int(t) for r, t in zip(q, y)] == [r == 0 for r in f["draft_rank"]]
    assert f["draft_top_probs"] == ((0.4, 0.4), (0.7, 0.2), (0.4, 0.3))
    assert top_k_fields(q, y, 0) == {}


def test_sampled_paths_are_seeded_and_both_tracers_agree(traced):
    """K seeded target paths: the same seed gives the same paths, another seed others; the plain forward
    (acceptance_trace) and the drafting protocol (drafter_trace) give the same accept_paths; greedy fields
    are those of the run without paths."""
    from calibrate.measure.acceptance_traces import drafter_trace, path_seed, target_paths

    target, draft, reqs, traces = traced
    kw = {"max_new_tokens": 12, "temperature": 0.7}
    paths = target_paths(target, reqs[0], paths=3, seed=5, **kw)
    assert [p.tokens for p in paths] == [
        p.tokens for p in target_paths(target, reqs[0], paths=3, seed=5, **kw)
    ]
    assert len({p.tokens for p in paths}) == 3
    assert [p.tokens for p in paths] != [
        p.tokens for p in target_paths(target, reqs[0], paths=3, seed=6, **kw)
    ]
    assert path_seed(5, "p0", 1) != path_seed(5, "p1", 1) and path_seed(5, "p0", 1) == path_seed(5, "p0", 1)
    plain = acceptance_trace(target, draft, reqs[0], paths=paths, **kw).trace
    via = drafter_trace(target, TextDrafter(draft), reqs[0], paths=paths, **kw).trace
    without = acceptance_trace(target, draft, reqs[0], **kw).trace
    assert (plain.match, plain.beta) == (without.match, without.beta) and without.accept_paths is None
    assert len(plain.accept_paths) == 3 and all(len(a) == 12 for a in plain.accept_paths)
    np.testing.assert_allclose(plain.accept_paths, via.accept_paths, atol=1e-5)
    assert all(0.0 <= a <= 1.0 for row in plain.accept_paths for a in row)


def test_acceptance_along_paths_averages_to_beta():
    """At position 0 (context = the prompt, the same on every path) E[min(1, q(y)/p(y))] over y ~ p is
    β_0 = Σ min(p, q) of the greedy trace (Leviathan et al. 2023, §3.5); 200 seeded paths agree within
    their sampling error."""
    from calibrate.measure.acceptance_traces import target_paths

    target, draft = tiny_pair(seed=2, noise=0.2)
    req = Request(tiny_prompts(n=1, seed=0)[0], prompt_id="q")
    kw = {"max_new_tokens": 1, "temperature": 1.0}
    paths = target_paths(target, req, paths=200, **kw)
    pt = acceptance_trace(target, draft, req, paths=paths, **kw)
    first = np.array([a[0] for a in pt.trace.accept_paths])
    assert 0.3 < pt.trace.beta[0] < 0.8 and 0.1 < first.std() < 0.5  # informative
    assert abs(first.mean() - pt.trace.beta[0]) < 4 * first.std() / np.sqrt(first.size) + 1e-6
