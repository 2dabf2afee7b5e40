"""``specsim check``'s one validated request (calibrate/cli/check_request.py): the mode the flags ask for, and
what each mode carries out of its checks, read before a model loads."""

import dataclasses

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from calibrate.cli.check_request import BATCH, GREEDY, SAMPLED, SERVE, check_mode, check_request  # noqa: E402
from specsim.cli.main import build_parser  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402

ZOO_CHECK = ["check", "--profile", "zoo-cpu-batch", "--preset", "zoo", "--no-write", "--no-progress"]


@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model fails the test: a request is built before anything loads."""

    def refuse(*a, **k):
        raise AssertionError("a model was loaded while the request was built")

    import calibrate.models.loading as loading

    monkeypatch.setattr(loading, "load_pair", refuse)


def _args(*extra):
    return build_parser().parse_args([*ZOO_CHECK, *extra])


@pytest.mark.parametrize(
    "extra, mode",
    [
        ([], GREEDY),
        (["--temperature", "0.7"], SAMPLED),
        (["--batch", "2"], BATCH),
        (["--serve-rates", "1"], SERVE),
        (["--serve-rates", "1", "--batch", "2"], SERVE),  # refused there: serving runs no --batch
        (["--batch", "2", "--temperature", "0.7"], BATCH),  # refused there: batches run greedy
    ],
)
def test_the_flags_name_one_mode(extra, mode):
    assert check_mode(_args(*extra)) == mode


def test_a_batched_request_carries_its_sizes_and_the_batched_cost(no_loading):
    request = check_request(_args("--batch", "2,1,2", "--gamma", "3,1", "--method", "M"))
    assert request.mode == BATCH and request.sizes == (1, 2) and request.gammas == [1, 3]
    assert request.batched is request.profile.latency.forward_costs().batched
    assert request.drafts == () and request.synthetic is None and request.methods == ["M"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.mode = GREEDY


def test_a_serving_request_fills_the_serving_defaults(no_loading):
    args = _args("--serve-rates", "1", "--gamma", "2", "--method", "M")
    request = check_request(args)
    assert request.mode == SERVE and request.batched is not None and request.sizes == ()
    assert (args.serve_requests, args.max_num_seqs) == (24, 8)


def test_a_batch_larger_than_a_scenario_group_is_refused_before_loading(no_loading):
    """--limit 6 leaves two prompts in each image-count group of the zoo set: a batch of 4 fills none, which
    the run would find only after minutes of loading."""
    from specsim.errors import SpecsimError

    args = _args("--batch", "2,4", "--gamma", "2", "--method", "M", "--limit", "6")
    with pytest.raises(
        SpecsimError,
        match=r"^--batch 4: the zoo-1img prompts number 2, fewer than one batch \(pass a larger --limit than",
    ):  # --limit cut the set: the hint named --prompts alone
        check_request(args)
    assert check_request(_args("--batch", "2", "--gamma", "2", "--method", "M", "--limit", "6")).sizes == (2,)


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--temperature", "0.7", "--halfwidth", "0.5"], "--halfwidth: greedy checks repeat in rounds"),
        (["--temperature", "0.7", "--min-rounds", "3"], "--min-rounds: greedy checks repeat in rounds"),
        (["--temperature", "0.7", "--max-rounds", "9"], "--max-rounds: greedy checks repeat in rounds"),
        (["--seed", "7"], "--seed: seeds sampled runs, serving arrivals"),
        (["--batch", "2", "--seed", "7"], "--seed: seeds sampled runs, serving arrivals"),
    ],
)
def test_flags_a_mode_does_not_read_are_refused(no_loading, extra, said):
    """A sampled check ran with its defaults (its --json said halfwidth_goal 0.015 of a 0.5 given), and a
    greedy check drew nothing with --seed."""
    from specsim.errors import SpecsimError

    with pytest.raises(SpecsimError, match=f"^{said}"):
        check_request(_args("--method", "M", "--gamma", "2", *extra))


@pytest.mark.parametrize(
    "extra",
    [
        ["--temperature", "1", "--seed", "7"],
        ["--serve-rates", "1", "--seed", "7"],
        ["--synthetic-acceptance", "tau:2@2", "--seed", "7"],
        ["--batch", "2", "--remeasure-batched", "--seed", "7"],
    ],
)
def test_a_seed_is_taken_where_something_is_drawn(no_loading, extra):
    assert check_request(_args("--method", "M", "--gamma", "2", *extra)).gammas == [2]


def test_a_tree_or_policy_given_twice_is_one_run(no_loading):
    """Twice, however spelt, the same tree or policy ran twice and the check failed after its rounds,
    broadcasting the rows' halfwidths (2 against 4)."""
    tree = "parents:0,0,0,0,1,1,2,2,3,3,4,4," + ",".join(map(str, range(5, 13)))  # 4,2,1 spelt out
    argv = [*ZOO_CHECK[:2], "zoo-cpu", *ZOO_CHECK[3:], "--gamma", "2", "--method", "M"]
    argv += ["--tree", "4,2,1", "--tree", tree, "--policy", "fixed:2", "--policy", "fixed:2"]
    request = check_request(build_parser().parse_args(argv))
    assert [type(d).__name__ for d in request.drafts] == ["TreeSpec", "GammaPolicy"]


@pytest.mark.parametrize("mode", [["--batch", "2"], ["--serve-rates", "1"]])
def test_seeds_beside_a_temperature_a_greedy_mode_refuses_names_the_temperature(no_loading, mode):
    """--seeds was refused as 'applies with --temperature > 0 only' where --temperature 1 was given."""
    args = _args("--gamma", "1", "--method", "M", *mode, "--temperature", "1", "--seeds", "2")
    with pytest.raises(SpecsimError, match=r"runs fixed gamma, greedy \(no --tree, --policy.*--temperature"):
        check_request(args)


def test_a_sampled_request_warns_nothing_before_loading(no_loading, recwarn):
    """The entries are checked before loading, every one the flags select; the greedy-beta warning came
    then and again after loading, and for scenarios the prompts did not use: it comes once, after."""
    request = check_request(_args("--gamma", "1", "--method", "M", "--temperature", "1", "--limit", "2"))
    assert request.mode == SAMPLED
    assert [str(w.message) for w in recwarn if "greedy output only" in str(w.message)] == []
