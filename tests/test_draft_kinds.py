"""Drafting kinds priced by hand: n-gram (no model, a host lookup per sequence) and an EAGLE-3 head (the
target's width, its own layer and reduced LM head, the target's features), in ``hardware``, ``serve`` and
``recommend``; and every row ``hardware --json`` prints reproduces its speedup as τ/(γ·c + v + o), o the sum
of its named terms."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim.cli.main import main
from specsim.draft_kinds.registry import draft_kind, kind_rows
from specsim.engines.imported import import_vllm
from specsim.engines.recommend import LatencyModel, recommend
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.draft_heads import draft_side
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.plan import plan_hardware
from specsim.hardware.roofline import forward_ms
from specsim.hardware.runtime import load_runtime
from specsim.predict.acceptance_source import MethodTau
from specsim.serve.roofline_cost import RooflineStepCost
from tests.test_recommend import SCRAPES

CTX, GAMMA, TAU = 700.0, 3, 2.2
BATCHES = (1, 8, 32)
# engine terms at round numbers, so the hand computation below names each one
TERMS = dict(
    overhead_ms_per_block=0.3,
    sampler_ms_per_token=0.002,
    rejection_ms_per_draft_token=0.004,
    schedule_ms_per_step=0.5,
    schedule_ms_per_sequence=0.01,
    schedule_overlap=1.0,
    schedule_overlap_sd=0.0,
    schedule_overlap_sd_model=0.0,
    head_floor_ms_per_forward=0.25,
    draft_floor_ms_per_forward=1.0,
    lookup_ms_per_sequence=0.05,
    extra_draft_forwards_per_block=0.0,
)


@pytest.fixture(scope="module")
def setting():
    rt = replace(load_runtime("vllm"), **TERMS)
    return load_model_spec("llama-3.1-8b"), load_device("h100-sxm"), rt


def _sched(b, gpu_ms, overlap):
    cpu = TERMS["schedule_ms_per_step"] + TERMS["schedule_ms_per_sequence"] * b
    return (1 - overlap) * cpu + overlap * max(cpu - gpu_ms, 0.0)


def _by_hand(target, dev, rt, b: int, draft=None, floor: float = 0.0, gamma=None, tau=None) -> float:
    """speedup = τ·T / block, straight from forward_ms and the terms above (γ, τ: the module's unless
    given)."""
    GAMMA, TAU = gamma or globals()["GAMMA"], tau or globals()["TAU"]  # noqa: N806
    tp = forward_ms(target, dev, rt, b, CTX, 1)
    tv = forward_ms(target, dev, rt, b, CTX, GAMMA + 1)
    tq = 0.0 if draft is None else forward_ms(draft, dev, rt, b, CTX, 1) + floor
    step = tp + TERMS["sampler_ms_per_token"] * b + _sched(b, tp, 1.0)
    gpu = GAMMA * tq + tv
    block = (
        gpu
        + TERMS["overhead_ms_per_block"]
        + TERMS["sampler_ms_per_token"] * b * (GAMMA + 1)
        + TERMS["rejection_ms_per_draft_token"] * b * GAMMA
        + (TERMS["lookup_ms_per_sequence"] * b if draft is None else 0.0)
        + _sched(b, gpu, 0.0)
    )
    return TAU * step / block


def _plan(target, draft, dev, rt, kind):
    mt = MethodTau("user", "given", (GAMMA,), (TAU,), ("--tau",))
    return plan_hardware(
        target, draft, [dev], [mt], efficiency=rt, batches=BATCHES, contexts=(CTX,), draft_kind=kind
    )


def test_registry_lists_every_kind_and_refuses_an_unknown_one():
    names = [r["kind"] for r in kind_rows()]
    assert names == ["model", "eagle", "eagle3", "mtp", "ngram", "suffix"]
    assert draft_kind("prompt-lookup").name == "ngram" and draft_kind(None).name == "model"
    with pytest.raises(SpecsimError, match="--draft-kind: expected one of model, eagle"):
        draft_kind("medusa")


def test_eagle3_head_is_shaped_as_the_kind_runs_it():
    target = load_model_spec("llama-3.1-8b")
    head = draft_side(draft_kind("eagle3"), target, None)  # the preset head for the target
    h = target.hidden
    assert head.name == "eagle3-llama3.1-instruct-8b" and head.layers == 1 and head.hidden == h
    assert head.vocab == 32000  # its own LM head over the draft vocabulary
    assert head.extra_weights == 3 * h * h + h * (32 * 128 + 2 * 8 * 128)  # fc + the 2h-wide QKV input
    assert draft_side(draft_kind("ngram"), target, None) is None
    with pytest.raises(SpecsimError, match="uses no model"):
        draft_side(draft_kind("ngram"), target, "llama-3.2-1b")


def test_ngram_in_hardware_matches_a_hand_computation(setting):
    target, dev, rt = setting
    plan = _plan(target, None, dev, rt, "ngram")
    for row in sorted(plan.rows, key=lambda r: r.batch_size):
        assert row.c == 0.0 and row.o_terms["lookup"] > 0
        assert row.speedup == pytest.approx(_by_hand(target, dev, rt, row.batch_size), rel=1e-12)


def test_eagle3_in_hardware_matches_a_hand_computation(setting):
    target, dev, rt = setting
    head = draft_side(draft_kind("eagle3"), target, None)
    plan = _plan(target, head, dev, rt, "eagle3")
    for row in sorted(plan.rows, key=lambda r: r.batch_size):
        hand = _by_hand(target, dev, rt, row.batch_size, head, TERMS["head_floor_ms_per_forward"])
        assert row.speedup == pytest.approx(hand, rel=1e-12) and row.o_terms["lookup"] == 0.0


@pytest.mark.parametrize("kind", ["ngram", "eagle3"])
def test_serve_prices_a_block_by_hand(setting, kind):
    """A decode-only SD step of the serving simulation: the verification, γ draft passes (none for n-gram)
    and the block's engine terms, as by hand (overlapped scheduling hidden: no GPU time is passed)."""
    target, dev, rt = setting
    draft = draft_side(draft_kind(kind), target, None)
    cost = RooflineStepCost(target, draft, dev, rt, draft_kind=kind)
    b, kv = 8, np.full((1, 8), CTX)
    got = float(cost.decode_steps_ms(batch=b, gamma=GAMMA, context_tokens=kv)[0])
    tv = forward_ms(target, dev, rt, b, CTX, GAMMA + 1)
    drafts = 0.0
    if draft is not None:
        drafts = sum(forward_ms(draft, dev, rt, b, CTX + j, 1) + 0.25 for j in range(GAMMA))
    cpu = TERMS["schedule_ms_per_step"] + TERMS["schedule_ms_per_sequence"] * b
    terms = 0.3 + 0.002 * b * (GAMMA + 1) + 0.004 * b * GAMMA + (0.05 * b if draft is None else 0.0) + cpu
    assert got == pytest.approx(tv + drafts + terms, rel=1e-9)
    assert cost.overhead_ms(b, 0) == pytest.approx(0.002 * b)  # target-only: sampling; scheduling hidden


@pytest.mark.parametrize("kind", ["ngram", "eagle3"])
def test_recommend_matches_a_hand_computation(setting, kind):
    target, dev, rt = setting
    draft = draft_side(draft_kind(kind), target, None)
    entry = import_vllm(SCRAPES).entry(method=kind, scenario="chat")
    lm = LatencyModel(target, draft, dev, efficiency=rt, draft_kind=kind)
    rec = recommend(entry, lm, batches=(1, 16), context_tokens=int(CTX), gamma_max=3)
    mt = MethodTau.from_entry(entry, (1, 2, 3))
    floor = TERMS["head_floor_ms_per_forward"]
    for b in (1, 16):
        best = max(_by_hand(target, dev, rt, b, draft, floor, g, t) for g, t in zip(mt.gammas, mt.tau))
        assert rec.at(b).best_speedup == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize(
    "args",
    [
        ["--pair", "llava-1.5-7b-68m", "--tau", "2.5", "--gamma", "4"],
        ["--target", "llama-3.1-8b", "--draft-kind", "eagle3", "--alpha", "0.7"],
        ["--target", "llama-3.1-8b", "--draft-kind", "ngram", "--alpha", "0.4", "--runtime", "sglang"],
        ["--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--alpha", "0.6", "--tp", "4"],
        ["--target", "qwen3-32b", "--draft", "qwen3-1.7b", "--alpha", "0.7", "--runtime", "hf-eager"],
        ["--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--alpha", "0.7", "--batch", "1,16,64"],
        ["--target", "mixtral-8x7b", "--draft-kind", "ngram", "--alpha", "0.4", "--tp", "2"],
    ],
)
def test_every_hardware_row_reproduces_its_speedup_from_c_v_and_o(args, capsys):
    code = main(["hardware", *args, "--device", "h100-sxm", "--device", "a100-80gb-sxm", "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    rows = plan["rows"] + plan["rows_at_largest_fitting_batch"]
    assert rows
    for r in rows:
        assert r["o"] == pytest.approx(sum(r["o_terms"].values()), rel=1e-12, abs=1e-15)
        rebuilt = r["tau"] / (r["best_gamma"] * r["c"] + r["v"] + r["o"])
        assert abs(rebuilt / r["speedup"] - 1.0) <= 1e-9, r


@pytest.mark.parametrize(
    "args",
    [
        ["--target", "Qwen/Qwen3-30B-A3B", "--draft", "Qwen/Qwen3-0.6B", "--device", "h100-sxm",
         "--alpha", "0.7", "--batch", "1,8,32", "--context", "1024"],
        ["--target", "llama-2-70b", "--draft", "llama-2-7b", "--dtype", "q4_k_m", "--alpha", "0.7",
         "--runtime", "llama.cpp", "--tp", "3", "--device", "rtx-3090", "--batch", "1-24",
         "--context", "4000"],
    ],
)  # fmt: skip
def test_hardware_json_names_every_batch_below_1_as_the_text_does(args, capsys):
    """The text said 'speedup<1 at B 1..8' where the JSON's speedup_below_1_from_batch was null (SD pays
    again at 32): the JSON had no field for a losing run that is not the last."""
    assert main(["hardware", *args]) == 0
    cell = capsys.readouterr().out.split("speedup<1 at B")[1].splitlines()[2]
    assert main(["hardware", *args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    by_device = [by_dev for by_dev in plan["stop_paying"].values()]
    (limit,) = [x for by_dev in by_device for by_ctx in by_dev.values() for x in by_ctx.values()]
    runs = limit["speedup_below_1_at_batches"]
    assert runs and all(a <= b for a, b in runs)
    for r in plan["rows"]:
        assert (r["speedup"] < 1) == any(a <= r["batch_size"] <= b for a, b in runs), r["batch_size"]
    assert f" {runs[0][0]}..{runs[0][1]}" in cell


def test_a_head_of_another_kind_is_refused_and_a_larger_draft_is_named():
    """An EAGLE-3 head was priced as a 1.27B draft model (1.72x) or as an EAGLE-1 head, and a 70B draft of an
    8B target without a word."""
    target = load_model_spec("llama-3.1-8b")
    for kind in ("model", "eagle"):
        with pytest.raises(SpecsimError, match="is an eagle3 head; give --draft-kind eagle3"):
            draft_side(draft_kind(kind), target, "eagle3-llama3.1-instruct-8b")
    assert draft_side(draft_kind("eagle3"), target, "eagle3-llama3.1-instruct-8b") is not None
    with pytest.warns(UserWarning, match="llama-3.1-70b is larger than the target llama-3.1-8b"):
        draft_side(draft_kind("model"), target, "llama-3.1-70b")


def test_a_draft_of_another_tokenizer_is_named_and_a_padded_one_is_not():
    """A Qwen3 draft of a Llama-3 target (151936 against 128256 ids) was priced, and pasted as a vLLM config,
    without a word: draft-model SD verifies the draft's tokens by id."""
    import warnings

    target = load_model_spec("llama-3.1-8b")
    said = "qwen3-0.6b has 151936 token ids and the target llama-3.1-8b 128256"
    with pytest.warns(UserWarning, match=said):
        draft_side(draft_kind("model"), target, "qwen3-0.6b")
    qwen_vl = load_model_spec("Qwen/Qwen2.5-VL-7B-Instruct")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Qwen2.5-VL-3B's 151936 against -7B's 152064: one tokenizer, padded
        draft_side(draft_kind("model"), qwen_vl, "Qwen/Qwen2.5-VL-3B-Instruct")
