"""Latency sweeps on tiny random Llama, Qwen2 and LLaVA models: profile written, valid, resumable; CLI
errors."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from calibrate.measure import latency_plan as L  # noqa: E402
from calibrate.models import loading as M  # noqa: E402
from calibrate.run.timing import Timing  # noqa: E402
from specsim.cli.main import main  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402
from specsim.profile_format import MethodAcceptance, Profile, Provenance  # noqa: E402
from specsim.profiles import (  # noqa: E402
    load_profile,
    save_profile,  # noqa: E402
)
from tests.test_models import TINY_LLAMA, TINY_LLAVA, TINY_QWEN2  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


PLAN = L.LatencyPlan(
    contexts_tokens=(8, 24),
    verify_context_tokens=16,
    gammas=(1, 2, 3),
    batch_sizes=(1, 2),
    prefill_tokens=(4, 12),
    warmup=0,
    min_repeats=2,
    max_repeats=3,
    prefill_warmup=0,
    prefill_min_repeats=1,
    prefill_max_repeats=2,
)


def _pair(target_cfg, draft_cfg):
    return {
        "target": M.build_random_model(target_cfg, name="tiny-target"),
        "draft": M.build_random_model(draft_cfg, seed=1, name="tiny-draft"),
    }


@pytest.mark.parametrize(
    "target_cfg, draft_cfg",
    [
        (TINY_LLAMA, {**TINY_LLAMA, "num_hidden_layers": 1}),
        (TINY_QWEN2, {**TINY_QWEN2, "hidden_size": 16}),
        (TINY_LLAVA, {**TINY_LLAVA, "text_config": {**TINY_LLAMA, "num_hidden_layers": 1}}),
    ],
)
def test_profile_is_written_valid_and_complete(tmp_path, target_cfg, draft_cfg):
    models = _pair(target_cfg, draft_cfg)
    out = tmp_path / "p.json"
    path, timings = L.calibrate_latency(models, PLAN, out, progress=False)
    prof = load_profile(str(path))
    lat = prof.latency
    assert lat.target_decode_ms_by_context.x == (8.0, 16.0, 24.0)  # verify context added to the Tp contexts
    assert lat.draft_decode_ms_by_context.x == (8.0, 16.0, 24.0)
    assert lat.target_verify_ms_by_gamma.x == (1.0, 2.0, 3.0) and lat.verify_context_tokens == 16
    assert lat.draft_decode_ms_by_batch.x == (1.0, 2.0)
    assert lat.target_prefill_ms_by_tokens.x == lat.draft_prefill_ms_by_tokens.x == (4.0, 12.0)
    assert all(
        2 <= n <= 2 * 3 for n in lat.target_verify_ms_by_gamma.n
    )  # one block per draft batch per round
    cm = lat.cost_model
    assert (
        cm.target_verify.rows == (2, 3, 4)
        and cm.draft_first.rows == (1, 2)
        and cm.draft_first.batch == (1, 2)
    )
    assert cm.draft_next.context_tokens == (9.0, 17.0, 25.0) and cm.target_prefill.rows == (4, 12)
    assert cm.overhead_ms_per_block.gamma == (1, 2, 3) and cm.overhead_ms_per_target_step >= 0
    assert cm.overhead_ms_per_block.context_tokens == (8.0, 16.0, 24.0)  # overhead by context too
    assert all(len(per_ctx) == 3 for per_ctx in cm.overhead_ms_per_block.ms_by_context)
    assert cm.host_check is not None and cm.host_check.sentinel.endswith("c=8.b=1")
    smp = cm.sampling  # what T > 0 adds: draws and acceptance at γ = 0 and every measured γ
    assert (
        smp.accept_gammas == (0, 1, 2, 3)
        and min(smp.accept_ms + (smp.draft_step_ms, smp.target_step_ms)) >= 0
    )
    assert {"sampling.draft.T=1", "sampling.target.T=0", "sampling.accept.g=3.T=1"} <= set(timings)
    # batch 1 at the verify context is the same point as Tq there: measured once.
    assert (
        lat.draft_decode_ms_by_batch.ms[0]
        == dict(zip(lat.draft_decode_ms_by_context.x, lat.draft_decode_ms_by_context.ms))[16.0]
    )
    vlm = models["target"].kind == "vlm"
    # An ensemble pair also times the adaptive weight update after each block; a text pair has no ensembles.
    assert (cm.adaptive_ms_per_block is not None) == vlm
    if vlm:
        ad = cm.adaptive_ms_per_block
        assert ad.gamma == (1, 2, 3) and ad.batch == (1, 2) and ad.context_tokens == (8.0, 16.0, 24.0)
        assert all(ms > 0 for row in ad.ms for ms in row)
    assert (lat.vision_encoder_ms_per_image is not None) == vlm
    assert (lat.draft_vision_encoder_ms_per_image is not None) == vlm
    prov = prof.provenance
    assert (prov.source, prov.weights, prov.target, prov.draft) == (
        "measured",
        "random",
        "tiny-target",
        "tiny-draft",
    )
    assert {"torch", "transformers"} <= set(prov.software) and prov.threads == torch.get_num_threads()
    assert lat.provenance == prov
    assert not L.partial_path(out).exists()
    assert {t.key for t in L.plan_tasks(PLAN, models)} <= set(timings)


def test_sweep_runs_the_engine_passes_on_exactly_its_context():
    """At context c the target runs 1-row steps and γ+1-row verifications (logits at every new position),
    always on a cache of exactly c; the draft's first step feeds 1 or 2 tokens on c, later steps c+1.."""
    models = _pair(TINY_LLAMA, TINY_LLAMA)
    seen = {"target": [], "draft": []}
    for role in seen:
        forward = models[role].model.forward

        def spy(*args, _role=role, _forward=forward, **kwargs):
            ids = kwargs["input_ids"]
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            seen[_role].append((tuple(ids.shape), cache.get_seq_length()))
            out = _forward(*args, **kwargs)
            seen[_role][-1] += (out.logits.shape[1],)
            return out

        models[role].model.forward = spy
    task = next(t for t in L.plan_tasks(PLAN, models) if t.key == "sweep.c=16")
    timings = L.run_task(task, models, PLAN)
    assert set(seen["target"]) == {((1, 1), 16, 1)} | {((1, g + 1), 16, g + 1) for g in PLAN.gammas}
    drafts = set(seen["draft"])
    assert {((b, r), 16, 1) for b in (1, 2) for r in (1, 2)} <= drafts
    assert all(ctx >= 16 and rows <= 2 for (_, rows), ctx, _ in drafts)
    assert timings["target_verify.r=4.c=16.b=1"].n >= 2 * PLAN.min_repeats
    assert "draft_next.r=1.c=17.b=2" in timings and "overhead.g=3.b=2.c=16" in timings


def test_resume_after_interruption(tmp_path):
    models = _pair(TINY_LLAMA, {**TINY_LLAMA, "num_hidden_layers": 1})
    out = tmp_path / "p.json"
    tasks = L.plan_tasks(PLAN, models)
    calls = []

    def interrupted(unit, models_, plan):
        if len(calls) >= 5:
            raise KeyboardInterrupt
        calls.extend(t.key for t in unit)
        return L.run_tasks(unit, models_, plan)

    with pytest.raises(KeyboardInterrupt):
        L.calibrate_latency(models, PLAN, out, progress=False, runner=interrupted)
    assert not out.exists()
    saved = json.loads(L.partial_path(out).read_text())
    assert set(calls) <= set(saved["timings"]) and 5 <= len(calls) < len(tasks)
    again = []

    def counting(unit, models_, plan):
        again.extend(t.key for t in unit)
        return L.run_tasks(unit, models_, plan)

    L.calibrate_latency(models, PLAN, out, progress=False, runner=counting)
    assert sorted(again) == sorted(t.key for t in tasks if t.key not in calls)  # nothing measured twice
    assert load_profile(str(out)).latency.target_verify_ms_by_gamma is not None
    assert not L.partial_path(out).exists()


def test_partial_from_other_models_is_refused(tmp_path):
    out = tmp_path / "p.json"
    a = _pair(TINY_LLAMA, TINY_LLAMA)
    fake = Timing(1.0, 0.1, 3, 0.01, (1.0, 1.0, 1.0))

    def fake_runner(unit, models_, plan):
        return {t.key: fake for t in unit}

    L.measure_latency(a, PLAN, partial=L.partial_path(out), progress=False, runner=fake_runner)
    b = {"target": M.build_random_model(TINY_QWEN2, name="other"), "draft": a["draft"]}
    with pytest.raises(SpecsimError, match="no-resume"):
        L.measure_latency(b, PLAN, partial=L.partial_path(out), progress=False, runner=fake_runner)
    done = L.measure_latency(
        b, PLAN, partial=L.partial_path(out), resume=False, progress=False, runner=fake_runner
    )
    assert set(done) == {t.key for t in L.plan_tasks(PLAN, b)}


def test_latency_written_into_existing_profile_keeps_acceptance(tmp_path):
    out = tmp_path / "p.json"
    prov = Provenance(
        target="tiny-target",
        draft="tiny-draft",
        device="x",
        dtype="float32",
        date="2026-01-01",
        source="measured",
    )
    entry = MethodAcceptance(method="M", scenario="s", images_per_prompt=0, gamma=3, tau=2.0)
    save_profile(Profile(provenance=prov, acceptance=(entry,)), out)
    L.calibrate_latency(_pair(TINY_LLAMA, TINY_LLAMA), PLAN, out, progress=False)
    prof = load_profile(str(out))
    assert prof.acceptance == (entry,) and prof.latency.target_decode_ms_by_context is not None


def test_the_tables_read_the_cost_model_that_predict_prices_with(tmp_path):
    """The 1-D tables a measured profile carries are its cost grids read at their contexts: Tp, Tq and
    Tv(2) at context 16 are the grids' target_decode, draft_next and target_verify (3 rows) there."""
    from specsim.profile_format.cost_grid import grid_ms

    out = tmp_path / "p.json"
    L.calibrate_latency(_pair(TINY_LLAMA, TINY_LLAMA), PLAN, out, progress=False)
    lat = load_profile(str(out)).latency
    cost = lat.forward_costs()
    assert not lat.cost_model_from_tables
    tp = dict(zip(lat.target_decode_ms_by_context.x, lat.target_decode_ms_by_context.ms))[16.0]
    tq = dict(zip(lat.draft_decode_ms_by_context.x, lat.draft_decode_ms_by_context.ms))[16.0]
    assert grid_ms(cost.target_decode, 1, 16)[0] == pytest.approx(tp)
    assert grid_ms(cost.draft_first, 1, 16)[0] == pytest.approx(tq)
    assert grid_ms(cost.target_verify, 3, lat.verify_context_tokens)[0] == pytest.approx(
        lat.target_verify_ms_by_gamma.ms[1]
    )


def test_captioner_is_timed(tmp_path):
    models = _pair(TINY_LLAMA, TINY_LLAMA)
    models["captioner"] = M.build_random_model(TINY_LLAVA, name="tiny-captioner")
    plan = L.LatencyPlan(**{**PLAN.__dict__, "caption_tokens": 3})
    path, _ = L.calibrate_latency(models, plan, tmp_path / "p.json", progress=False)
    prof = load_profile(str(path))
    assert prof.latency.captioner_ms_per_image > 0 and "tiny-captioner" in prof.provenance.notes


def test_plan_validation():
    with pytest.raises(SpecsimError, match="gammas"):
        L.LatencyPlan(gammas=(0, 1))
    with pytest.raises(SpecsimError, match="target_rel_halfwidth"):
        L.LatencyPlan(target_rel_halfwidth=2.0)
    assert L.LatencyPlan.from_json(PLAN.to_json()) == PLAN


def test_default_plan_for_vlm_covers_one_to_five_images():
    m = M.build_random_model(TINY_LLAVA)
    plan = L.default_plan(m)
    assert plan.prefill_tokens == (16,) + tuple(64 + 16 * k for k in range(6))
    assert plan.verify_context_tokens == 16 + 64


# --------------------------------------------------------------------------- CLI
def _configs(tmp_path):
    t, d = tmp_path / "t.json", tmp_path / "d.json"
    t.write_text(json.dumps(TINY_LLAVA))
    d.write_text(json.dumps({**TINY_LLAVA, "text_config": {**TINY_LLAMA, "num_hidden_layers": 1}}))
    return str(t), str(d)


FAST = [
    "--contexts",
    "8,24",
    "--verify-context",
    "16",
    "--gammas",
    "1,2",
    "--batch-sizes",
    "1,2",
    "--prefill-tokens",
    "8",
    "--warmup",
    "0",
    "--min-repeats",
    "1",
    "--max-repeats",
    "2",
    "--quiet",
    "--threads",
    "1",
]


def test_cli_with_configs(tmp_path, capsys):
    t, d = _configs(tmp_path)
    out = tmp_path / "prof.json"
    assert (
        main(["calibrate", "latency", "--target-config", t, "--draft-config", d, "--out", str(out), *FAST])
        == 0
    )
    text = capsys.readouterr().out
    assert "c = Tq/Tp" in text and "v(gamma)" in text and "worst 95% CI half-width" in text
    lat = load_profile(str(out)).latency
    assert lat.vision_encoder_ms_per_image > 0 and lat.target_verify_ms_by_gamma.x == (1.0, 2.0)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dtype", "int8"], "unknown dtype 'int8'"),
        (["--preset", "no-such-pair"], "unknown preset pair 'no-such-pair'"),
        (["--target-config", "no-such-config"], "unknown model config 'no-such-config'"),
        (["--verify-context", "0"], "--verify-context: expected an integer >= 1"),
        (["--batched-only"], "--batched-only: needs --request-batches"),
        (["--batched-only", "--request-batches", "1,2"], "does not exist (run without --batched-only first)"),
        *(  # each shapes the batch-1 grid that --batched-only keeps: it ran, and the flag changed nothing
            (
                ["--batched-only", "--request-batches", "1", *flag.split()],
                f"{flag.split()[0]}: shapes the batch-1",
            )
            for flag in ("--gammas 1,2", "--warmup 0", "--tree 2,1", "--no-vision")
        ),
    ],
)
def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, capsys, extra, message):
    t, d = _configs(tmp_path)
    base = {"--target-config": t, "--draft-config": d, "--out": str(tmp_path / "p.json")}
    args = ["calibrate", "latency", *(x for kv in base.items() for x in kv if kv[0] not in extra)]
    assert main(args + extra + ["--quiet"]) == 2  # a case's option stands for the base's: given once
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_missing_draft_and_vocab_mismatch(tmp_path, capsys):
    t, _ = _configs(tmp_path)
    assert main(["calibrate", "latency", "--target-config", t, "--out", str(tmp_path / "p.json")]) == 2
    assert "--draft/--draft-config" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**TINY_LLAMA, "vocab_size": 64}))
    assert (
        main(
            [
                "calibrate",
                "latency",
                "--target-config",
                t,
                "--draft-config",
                str(other),
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 2
    )
    assert "vocabulary" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sweep_uses_the_gpu(tmp_path):
    models = {
        "target": M.build_random_model(TINY_LLAMA, device="cuda", dtype="float16", name="t"),
        "draft": M.build_random_model(TINY_LLAMA, device="cuda", dtype="float16", seed=1, name="d"),
    }
    path, timings = L.calibrate_latency(models, PLAN, tmp_path / "p.json", progress=False)
    prof = load_profile(str(path))
    assert prof.provenance.device == torch.cuda.get_device_name(0) and prof.provenance.dtype == "float16"
    assert all(t.median_ms > 0 for t in timings.values())
