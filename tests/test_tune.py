"""`specsim tune`'s library: trials are `serve`'s simulations, TPE lands within 0.2 % of the exhaustive
optimum, executors agree, studies resume, constraints and prices hold."""

import dataclasses
import json

import pytest

from specsim.cli.main import main
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.serve.compare import Workload
from specsim.serve.metrics import Slo
from specsim.tune.executor import LocalExecutor
from specsim.tune.objective import make_objective
from specsim.tune.space import parse_draft_option, parse_space
from specsim.tune.study import StudyPlan, run_study
from specsim.tune.trial import Deployment, TrialConfig, TrialResult, TuneContext, run_trial

optuna = pytest.importorskip("optuna")

DRAFT = "llava-1.5-68m@0.8"
SMALL = TuneContext("llava-1.5-7b", Workload(40, 128, 1, 24), 30.0, Slo(tpot_ms=12.0), seed=3)


def _space(**kw):
    return parse_space(devices="h100-sxm", drafts=[DRAFT], **({"gammas": "0-3"} | kw))


def _study(space, plan, executor=None, context=SMALL, objective="tokens-per-gpu"):
    obj = make_objective(
        objective, has_slo=context.slo is not None, slo_attainment=0.9, devices=space.devices
    )
    with executor or LocalExecutor(1) as ex:
        return obj, run_study(space, context, obj, plan, ex)


def test_a_trial_is_what_serve_prints(capsys):
    """run_trial is `specsim serve`'s simulation: the same settings give the SD side of `serve --json`."""
    argv = "--pair llava-1.5-7b-68m --device h100-sxm --rate 8 --gamma 3 --alpha 0.7 --requests 60 "
    argv += "--prompt-tokens 200 --output-tokens 40 --max-num-seqs 32 --seed 5 --slo tpot=9 --json"
    assert main(["serve", *argv.split()]) == 0
    shown = json.loads(capsys.readouterr().out)["comparison"]["sd"]
    context = TuneContext("llava-1.5-7b", Workload(60, 200, 1, 40), 8.0, Slo(tpot_ms=9.0), seed=5)
    dep = Deployment("h100-sxm", None, 1, parse_draft_option("llava-1.5-68m@0.7"), GammaPolicy(3), 32)
    result = run_trial(TrialConfig(context, dep))
    assert result.fits and json.loads(json.dumps(result.metrics.to_json())) == shown


@pytest.mark.parametrize("kind", ["eagle3", "ngram"])
def test_a_trial_of_a_drafting_kind_is_what_serve_draft_kind_prints(capsys, kind):
    """A registry kind (an EAGLE-3 head, the n-gram lookup) is priced as `serve --draft-kind` prices it."""
    argv = f"--target llama-3.1-8b --draft-kind {kind} --device h100-sxm --rate 8 --gamma 3 --alpha 0.7 "
    argv += "--requests 60 --prompt-tokens 200 --output-tokens 40 --max-num-seqs 32 --seed 5 --json"
    assert main(["serve", *argv.split()]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["draft_kind"] == kind and (shown["draft"] is None) == (kind == "ngram")
    context = TuneContext("llama-3.1-8b", Workload(60, 200, 0, 40), 8.0, seed=5)
    option = parse_draft_option(f":{kind}@0.7")
    assert option.kind == kind and option.model is None
    result = run_trial(TrialConfig(context, Deployment("h100-sxm", None, 1, option, GammaPolicy(3), 32)))
    sd = json.loads(json.dumps(result.metrics.to_json()))
    assert result.fits and sd["tpot_ms"] == shown["comparison"]["sd"]["tpot_ms"]
    assert sd == shown["comparison"]["sd"] and result.kv_cache_tokens == shown["scheduler"]["kv_cache_tokens"]


def test_configs_and_results_round_trip_and_a_deployment_that_cannot_fit_says_why():
    dep = _space(gamma_breaks="8", max_num_seqs="16").deployment({"gamma": 3, "gamma_from_9": 1})
    assert dep.policy.gamma_at(8) == 3 and dep.policy.gamma_at(9) == 1
    config = TrialConfig(SMALL, dep)
    assert TrialConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    result = run_trial(config)
    back = TrialResult.from_json(json.loads(json.dumps(result.to_json())))
    # the run's mean decode batch and widest cache are serve's decode-phase note, not the metrics' JSON
    assert back == dataclasses.replace(
        result, metrics=dataclasses.replace(result.metrics, max_context_tokens=0, mean_decode_batch=0.0)
    )
    big = TuneContext("llama-2-70b", Workload(4, 64, 0, 8), 1.0)
    unfit = run_trial(
        TrialConfig(big, Deployment("l4", None, 1, parse_draft_option("llama-2-7b@0.7"), GammaPolicy(2), 8))
    )
    assert not unfit.fits and "no room for a KV cache" in unfit.reason and unfit.metrics is None


def test_every_point_of_a_banded_space_drafts_its_bands_gammas():
    """The γ policy is kept in one form (bands equal to the first fall back to it), which must not change
    what any batch size drafts; equal policies are one deployment."""
    space = _space(gammas="0-2", gamma_breaks="4,16")
    deployments = set()
    for params in space.enumerate():
        policy = space.deployment(params).policy
        bands = [params["gamma"], params["gamma_from_5"], params["gamma_from_17"]]
        for batch in (1, 4, 5, 16, 17, 300):
            assert policy.gamma_at(batch) == bands[(batch > 4) + (batch > 16)]
        deployments.add(space.deployment(params))
    assert len(deployments) == space.size == 27


def test_tpe_with_fewer_trials_than_the_space_lands_on_the_exhaustive_optimum():
    """TPE over 40 of 192 deployments lands within 0.2 % of the exhaustive search's best tokens/s per GPU,
    among its best 15. The exact optimum was asserted once; the top of this landscape is flat (its best 15
    lie within 0.2 %, the best two 0.004 % apart), so which of them 40 seeded trials meet moved with a
    runtime refit."""
    space = parse_space(
        devices="h100-sxm", drafts=[DRAFT], gammas="0-7", gamma_breaks="8", max_num_seqs="16,32,64"
    )
    context = TuneContext("llava-1.5-7b", Workload(150, 128, 1, 32), 40.0, Slo(tpot_ms=12.0))
    obj, full = _study(space, StudyPlan("exhaustive", 10_000, 16), context=context)
    assert full.search == "exhaustive" and len(full.records) == full.simulations == space.size == 192
    assert len({r.deployment for r in full.records}) == space.size  # every point once
    best = full.best(obj)
    values = sorted((r.value for r in full.records), reverse=True)
    _, tpe = _study(space, StudyPlan("tpe", 40, 4, seed=0), context=context)
    assert tpe.search == "tpe" and len(tpe.records) == 40 and tpe.simulations < space.size
    found = tpe.best(obj)
    assert found.value >= best.value * (1 - 0.002) and found.value >= values[14]
    assert found.deployment in {r.deployment for r in full.records if r.value == found.value}


def _trials(outcome):
    return [(r.number, r.deployment, r.result, r.value) for r in outcome.records]


def test_local_and_ray_executors_give_the_same_trials():
    """Deterministic ask/tell rounds: one process, two processes and a local Ray cluster of 2 workers that
    this test starts give the same trials (deployments and results)."""
    pytest.importorskip("ray")
    from specsim.tune.executor import RayExecutor

    space = _space(gammas="0-4", max_num_seqs="8,16")
    plan = StudyPlan("tpe", 8, 4, seed=1)
    _, one = _study(space, plan)
    _, two = _study(space, plan, LocalExecutor(2))
    _, ray = _study(space, plan, RayExecutor(None, 2))
    assert _trials(one) == _trials(two) == _trials(ray)
    assert len(one.records) == 8 and one.simulations == ray.simulations


@pytest.mark.parametrize("suffix", [".db", ".log"])
def test_a_stored_study_resumes_and_refuses_other_settings(tmp_path, suffix):
    space = _space(max_num_seqs="8,16,32")
    storage = str(tmp_path / f"study{suffix}")
    _, first = _study(space, StudyPlan("tpe", 5, 2, storage=storage))
    _, again = _study(space, StudyPlan("tpe", 9, 2, storage=storage))
    assert len(again.records) == 9 and again.simulations <= 4
    assert _trials(again)[:5] == _trials(first)  # stored trials come back as they were told
    _, done = _study(space, StudyPlan("tpe", 9, 2, storage=storage))
    assert done.simulations == 0 and len(done.records) == 9
    with pytest.raises(SpecsimError, match=r"^--device/--runtime/.*--max-num-seqs: study .* other settings"):
        _study(_space(max_num_seqs="8,16"), StudyPlan("tpe", 9, 2, storage=storage))


def test_a_stored_study_names_the_option_its_settings_differ_in(tmp_path):
    """Another --rate was refused as 'another context_sha256' under --study-name: the option is named now;
    a study stored before the context's fields were kept names the load and SLO options as a whole."""
    import optuna

    from specsim.tune.study import STUDY_ATTR

    space, storage = _space(max_num_seqs="8,16"), str(tmp_path / "study.db")
    _study(space, StudyPlan("tpe", 2, 2, storage=storage))
    with pytest.raises(SpecsimError, match=r"^--rate: study 'specsim-tune' in .* other settings of --rate;"):
        _study(
            space, StudyPlan("tpe", 2, 2, storage=storage), context=dataclasses.replace(SMALL, rate_per_s=8.0)
        )
    study = optuna.load_study(study_name="specsim-tune", storage="sqlite:///" + storage)
    older = {k: v for k, v in study.user_attrs[STUDY_ATTR].items() if k != "context_fields_sha256"}
    study.set_user_attr(STUDY_ATTR, older)
    _study(space, StudyPlan("tpe", 2, 2, storage=storage))  # the same settings still resume it
    with pytest.raises(SpecsimError, match=r"^the load and SLO options: study"):
        _study(space, StudyPlan("tpe", 2, 2, storage=storage), context=dataclasses.replace(SMALL, seed=4))


def test_a_resumed_study_draws_new_points(tmp_path):
    """The sampler was seeded alike in every process, so a resumed (or joined) study's next trials repeated
    the first run's deployments: 8 more trials were the first 8 again, and nothing new was simulated."""
    space = _space(gammas="0-6", max_num_seqs="8,16,32")
    storage = str(tmp_path / "study.db")
    _, first = _study(space, StudyPlan("tpe", 6, 2, storage=storage))
    _, again = _study(space, StudyPlan("tpe", 12, 2, storage=storage))
    before = {str(r.deployment) for r in first.records}
    after = [str(r.deployment) for r in again.records[6:]]
    assert len(after) == 6 and sum(d in before for d in after) < 3 and again.simulations >= 4


def test_an_exhaustive_study_resumes_where_it_stopped(tmp_path):
    space = _space(max_num_seqs="8,16")
    storage = str(tmp_path / "grid.db")
    _, part = _study(space, StudyPlan("exhaustive", 3, 2, storage=storage))
    _, rest = _study(space, StudyPlan("exhaustive", 100, 2, storage=storage))
    assert len(part.records) == 3 and rest.simulations == space.size - 3
    assert sorted(str(r.deployment) for r in rest.records) == sorted(
        str(space.deployment(p)) for p in space.enumerate()
    )


def test_an_auto_study_resumes_with_more_trials_than_its_space(tmp_path):
    """--search auto ran TPE for 3 trials and enumerates for 100: resuming was refused as another --search."""
    space = _space(max_num_seqs="8,16")
    storage = str(tmp_path / "auto.db")
    _, part = _study(space, StudyPlan("auto", 3, 2, storage=storage))
    _, rest = _study(space, StudyPlan("auto", 100, 2, storage=storage))
    assert part.search == "tpe" and rest.search == "exhaustive"
    assert {str(r.deployment) for r in rest.records} == {str(space.deployment(p)) for p in space.enumerate()}


def test_an_slo_constraint_keeps_infeasible_trials_out_of_the_best():
    """Tokens/s per GPU under an SLO: a full batch serves more tokens but misses the TPOT bound."""
    space = _space(gammas="0,3", max_num_seqs="4,64")
    loaded = TuneContext("llava-1.5-7b", Workload(60, 128, 1, 24), 80.0, Slo(tpot_ms=10.0), seed=3)
    obj, out = _study(space, StudyPlan("exhaustive", 10), context=loaded)
    best = out.best(obj)
    assert best.feasible and best.result.metrics.slo_met_fraction >= 0.9
    assert (best.deployment.policy.gamma, best.deployment.max_num_seqs) == (3, 4)
    faster = [r for r in out.records if r.value > best.value]
    assert faster and all(not r.feasible and r.result.metrics.slo_met_fraction < 0.9 for r in faster)


def test_usd_per_mtok_prices_gpus_and_says_when_a_device_has_no_price():
    with pytest.raises(SpecsimError, match="device 'h200' has no price.*--price h200="):
        make_objective("usd-per-mtok", has_slo=False, slo_attainment=0.9, devices=("h200",))
    obj = make_objective(
        "usd-per-mtok", has_slo=False, slo_attainment=0.9, devices=("h100-sxm",), prices={"h100-sxm": 3.6}
    )
    dep = _space().deployment({"gamma": 2})
    result = run_trial(TrialConfig(SMALL, dep))
    assert obj.value(dep, result) == pytest.approx(3.6 / 3600 / result.metrics.output_tokens_per_s * 1e6)


def test_an_image_mix_draws_each_requests_images_after_its_arrival():
    import numpy as np

    from specsim.serve.arrivals import parse_image_mix

    mix = parse_image_mix("0:1,1:2,3:1")
    assert mix == ((0, 0.25), (1, 0.5), (3, 0.25)) and parse_image_mix("2") == ((2, 1.0),)
    mixed, plain = Workload(4000, 64, 1, 8, image_mix=mix), Workload(4000, 64, 1, 8)
    a, b = mixed.at_rate(5.0, np.random.default_rng(1)), plain.at_rate(5.0, np.random.default_rng(1))
    assert np.array_equal(a.arrival_s, b.arrival_s)  # the arrivals are drawn first, as without a mix
    shares = [np.mean(a.images == k) for k in (0, 1, 3)]
    assert np.allclose(shares, [0.25, 0.5, 0.25], atol=0.03) and set(np.unique(a.images)) == {0, 1, 3}
    assert Workload.from_json(json.loads(json.dumps(mixed.to_json()))) == mixed
    for bad in ("1:0", "1:2,1:3", "x", "-1"):
        with pytest.raises(SpecsimError, match="--images"):
            parse_image_mix(bad)


class _Interrupted(LocalExecutor):
    """An executor interrupted (Ctrl-C) in its second round."""

    def __init__(self):
        super().__init__(1)
        self.rounds = 0

    def map(self, fn, items):
        self.rounds += 1
        if self.rounds == 2:
            raise KeyboardInterrupt
        return super().map(fn, items)


def test_an_interrupted_study_resumes_with_the_rounds_it_lost(tmp_path):
    space = _space(max_num_seqs="8,16")
    storage = str(tmp_path / "cut.db")
    with pytest.raises(KeyboardInterrupt):
        _study(space, StudyPlan("exhaustive", 100, 3, storage=storage), _Interrupted())
    _, rest = _study(space, StudyPlan("exhaustive", 100, 3, storage=storage))
    assert rest.simulations == space.size - 3 and len(rest.records) == space.size
    assert {r.deployment for r in rest.records} == {space.deployment(p) for p in space.enumerate()}
