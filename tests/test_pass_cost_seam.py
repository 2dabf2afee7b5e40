"""One pass-cost seam: every pass is priced through specsim.costs.pass_cost, implemented once by measured
grids (specsim/costs/grid_pass_cost.py) and once by the roofline (specsim/hardware/roofline_pass_cost.py);
no other module reads a grid or a runtime's roofline to price a pass."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from specsim.costs import pass_cost
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import DRAFT, FIRST, PREFILL, STEP, TARGET, draft_steps_ms
from specsim.hardware.device import load_device
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.roofline import decode_ms, forward_ms, prefill_ms, verify_ms
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.hardware.runtime import load_runtime
from specsim.presets import pair_models
from specsim.profiles import load_profile

ROOT = Path(__file__).resolve().parent.parent
GRID_READERS = {"specsim/profile_format/cost_grid.py", "specsim/costs/grid_pass_cost.py"}
ROOFLINE = {
    "specsim/hardware/roofline.py",
    "specsim/hardware/passes.py",
    "specsim/hardware/roofline_pass_cost.py",
}
# what prices a pass from a grid or from the roofline (hardware/__init__ re-exports the latter for users)
GRID_PRIMITIVES = {"grid_ms"}
ROOFLINE_PRIMITIVES = {
    "forward_ms",
    "decode_ms",
    "verify_ms",
    "prefill_ms",
    "vision_ms",
    "compute_bound",
    "roofline_terms_ms",
    "attention_terms_ms",
    "pass_terms",
    "pass_table",
}
GRID_FIELDS = re.compile(
    r"\.(target_decode|target_verify|draft_first|draft_next|target_prefill|draft_prefill|draft_step|"
    r"draft_first_step|target_decode_unpadded)\b|overhead_ms_per_block\.at\("
)


def _modules():
    for package in ("specsim", "calibrate"):
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def _imported_names(text: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("specsim.", "calibrate.")):
            out |= {a.name for a in node.names}
    return out


def test_no_module_but_the_implementations_prices_a_pass_from_a_grid_or_the_roofline():
    offenders = []
    for rel, text in _modules():
        names = _imported_names(text)
        if names & GRID_PRIMITIVES and rel not in GRID_READERS:
            offenders.append(f"{rel}: imports {sorted(names & GRID_PRIMITIVES)}")
        if names & ROOFLINE_PRIMITIVES and rel not in ROOFLINE | {"specsim/hardware/__init__.py"}:
            offenders.append(f"{rel}: imports {sorted(names & ROOFLINE_PRIMITIVES)}")
        # the profile contract defines the grids, calibrate's measurements build them
        if not rel.startswith(("specsim/profile_format/", "calibrate/measure/")) and rel not in GRID_READERS:
            offenders += [f"{rel}: reads {m.group(0)}" for m in GRID_FIELDS.finditer(text)]
    assert not offenders, offenders


def test_both_implementations_answer_every_method_of_the_interface():
    wanted = {
        name
        for name, value in vars(pass_cost.PassCost).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    for cls in (GridPassCost, RooflinePassCost):
        assert wanted <= set(dir(cls)), (cls.__name__, sorted(wanted - set(dir(cls))))


def test_the_roofline_implementation_prices_what_the_roofline_functions_price():
    """A second implementation: each kind of pass against the roofline functions it stands for."""
    target, draft = (load_model_spec(n) for n in pair_models("llava-1.5-7b-68m"))
    dev, rt = load_device("h100-sxm"), load_runtime("vllm")
    cost = RooflinePassCost(target, draft, dev, rt)
    ctx, b = np.array([128.0, 1024.0]), np.array([[1.0], [8.0]])
    assert np.array_equal(cost.pass_ms(TARGET, 1, ctx, b).ms, decode_ms(target, dev, rt, ctx, b))
    # a draft forward pays the drafting kind's per-forward floor on top of its roofline (the batch issue)
    floored = cost.draft_floor_ms(decode_ms(draft, dev, rt, ctx, b))
    assert np.array_equal(cost.pass_ms(DRAFT, 1, ctx, b).ms, floored)
    assert np.array_equal(cost.pass_ms(TARGET, 5, ctx, b).ms, verify_ms(target, dev, rt, 4, ctx, b))
    assert cost.pass_ms(TARGET, 300, 0, kind=PREFILL).ms == prefill_ms(target, dev, rt, 300)
    root = forward_ms(draft, dev, rt, 1, 64, 2, logits=1)
    assert cost.pass_ms(DRAFT, 2, 64, kind=FIRST).ms == cost.draft_floor_ms(root)
    assert root != forward_ms(draft, dev, rt, 1, 64, 2)
    assert not np.any(cost.pass_ms(TARGET, 1, ctx, b).extrapolated)


def test_the_grid_implementation_reads_each_pass_from_its_own_grid():
    """A block's first draft step from ``draft_first``, the later ones from ``draft_next``, a verification
    from ``target_verify``, a prompt along the prefill grid's rows; the batched engine's own grids where given
    (its first step falls back to ``draft_step`` where not measured apart)."""
    from specsim.profile_format.cost_grid import grid_ms

    profile = load_profile("zoo-cpu-batch")
    model = profile.latency.forward_costs()
    one, batch = GridPassCost.request(profile.latency), GridPassCost(model, model.batched)
    assert one.pass_ms(DRAFT, 1, 90.0, kind=FIRST).ms == grid_ms(model.draft_first, 1, 90.0)[0]
    assert one.pass_ms(DRAFT, 1, 90.0).ms == grid_ms(model.draft_next, 1, 90.0)[0]
    assert one.pass_ms(TARGET, 3, 90.0).ms == grid_ms(model.target_verify, 3, 90.0)[0]
    assert (
        one.pass_ms(TARGET, 40, 0, kind=PREFILL).ms == grid_ms(model.target_prefill, 40, 0, along="rows")[0]
    )
    assert batch.pass_ms(TARGET, 3, 90.0, 2).ms == grid_ms(model.batched.target_verify, 3, 90.0, 2)[0]
    steps = draft_steps_ms(batch, 90.0 + np.arange(3), 2).ms
    assert steps[0] == grid_ms(model.batched.draft_first_step, 1, 90.0, 2)[0]
    assert np.array_equal(steps[1:], grid_ms(model.batched.draft_step, 1, 91.0 + np.arange(2), 2)[0])
    assert batch.measured_rows(TARGET, STEP) == model.batched.target_verify.rows
    with pytest.raises(Exception, match="batch 64 was not measured"):
        batch.check_batch(64)


def test_the_request_shape_prices_a_roofline_as_the_plan_shape_does():
    """The same source through two shapes: a request priced by ``price`` pass by pass through a
    RooflinePassCost, its prompt walking from P to P + N, against the plan's best-γ row at batch 1 and the
    request's mean context, same τ: within 2 % (the plan reads every pass at one context, the walk at
    each)."""
    from specsim.hardware.plan import plan_hardware
    from specsim.predict.acceptance_source import MethodTau
    from specsim.predict.pricing import RequestSpec, price

    profile = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-check")
    entry = profile.one_entry(None, None)
    target, draft = (load_model_spec(n) for n in pair_models("qwen2.5-coder-0.5b-1.5b"))
    dev, rt = load_device("h100-sxm"), load_runtime("vllm")
    gamma, prompt, new = 4, 500, 200
    spec = RequestSpec(prompt, prompt, 0, new_tokens=new)
    walked = price(profile, entry, gamma, [spec], cost=RooflinePassCost(target, draft, dev, rt))
    mt = MethodTau("m", "s", (gamma,), (walked.tau,), ("given",))
    row = plan_hardware(
        target, draft, [dev], [mt], efficiency=rt, batches=(1,), contexts=(prompt + new // 2,)
    )
    assert walked.decode_speedup == pytest.approx(row.rows[0].speedup, rel=0.02)
    assert walked.decode_speedup != pytest.approx(row.rows[0].speedup, rel=1e-6)  # two walks, not one number
