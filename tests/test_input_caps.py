"""Second hostile-input pass: exact schema versions, the published set's structure and ranges, bounded
trees and policies, and numeric flags of import / recommend / calibrate checked (and capped) before any work.
Each case failed before its fix (accepted, a traceback, a hang, or an error only after loading models)."""

import json
import time

import pytest

from specsim.cli.main import main
from specsim.draft_shapes.policies import parse_policy
from specsim.draft_shapes.trees import TreeSpec, parse_tree
from specsim.errors import SpecsimError
from specsim.hardware.roofline import Efficiency
from specsim.validation.published_set import parse_published_set
from tests.test_fuzz_commands import ENGINES, _small_published_set


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err, (argv, err)
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and "Traceback" not in err


# --------------------------------------------------------------------------- schema versions
@pytest.mark.parametrize("version", [True, 1.0])
def test_schema_version_is_an_exact_integer(version):
    with pytest.raises(SpecsimError, match="schema_version 1"):
        TreeSpec.from_json({"schema_version": version, "parents": [0]})
    with pytest.raises(SpecsimError, match="schema_version 1"):
        Efficiency.from_json(Efficiency().to_json() | {"schema_version": version})
    with pytest.raises(SpecsimError, match="schema_version 1"):
        parse_published_set(_small_published_set() | {"schema_version": version})


def test_calibrate_records_need_their_exact_schema_version(tmp_path):
    pytest.importorskip("torch")
    from calibrate.measure import latency_plan as L
    from calibrate.run.decode_records import DecodeResult
    from calibrate.run.timing import Timing

    timing = Timing(1.0, 0.1, 3, 0.01, (1.0, 1.0, 1.0))
    with pytest.raises(SpecsimError, match="schema_version 1, got true"):
        Timing.from_json(timing.to_json() | {"schema_version": True})
    with pytest.raises(SpecsimError, match="schema_version 2, got 2.0"):
        L.LatencyPlan.from_json(L.LatencyPlan().to_json() | {"schema_version": 2.0})
    result = DecodeResult(tokens=(1,), prompt_tokens=2, gamma=0, method="target", setup_ms={}, blocks=())
    with pytest.raises(SpecsimError, match="schema_version 1"):
        DecodeResult.from_json(result.to_json() | {"schema_version": True})
    identity = {"target": "t"}
    data = L.PartialState(identity, {"k": timing}).to_json()
    data["timings"]["k"]["schema_version"] = True
    path = tmp_path / "p.partial.json"
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="schema_version 1, got true"):
        assert L.load_partial(path, identity).timings == {}  # reported, then measured again


# --------------------------------------------------------------------------- published set (validate --data)
def _set_with(mutate):
    data = _small_published_set()
    mutate(data)
    return data


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(models=[1, 2]), "fuzz.json.models: expected an object of model configs"),
        (
            lambda d: d["models"].update(x={"source": "s"}),
            "models['x']: expected an object with a 'config' object",
        ),
        (lambda d: d["rows"][0].update(flags=5), "rows[0].flags: expected a list of strings"),
        (lambda d: d["rows"][0].update(weights_dtype=5), "rows[0].weights_dtype: expected a string"),
        (lambda d: d["rows"][0].update(tau_derivation={"a": 1}), "rows[0].tau_derivation: expected a string"),
        (lambda d: d["rows"][0].update(batch=10**9), "rows[0].batch: expected a value in 1..4096"),
        (
            lambda d: d["rows"][0].update(target_context_tokens=1e30),
            "target_context_tokens: expected a value in 0..16777216",
        ),
        (lambda d: d["rows"][0].update(gpus=10**6), "rows[0].gpus: expected a value in 1..1024"),
        (lambda d: d["rows"][0].update(multimodal="yes"), "rows[0].multimodal: expected true or false"),
        (
            lambda d: d["rows"][0].update(extra_draft_forwards_per_block=-1),
            "rows[0].extra_draft_forwards_per_block: expected a number >= 0",
        ),
    ],
)
def test_published_set_structure_and_ranges(mutate, message):
    with pytest.raises(SpecsimError) as err:
        parse_published_set(_set_with(mutate), "fuzz.json")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_validate_data_with_a_zero_reference_speedup(tmp_path, capsys):
    data = _small_published_set()
    ref = next(r for r in data["rows"] if r.get("speedup"))
    ratio = dict(ref, id="ratio-row", batch=ref["batch"] + 1, ratio_to=ref["id"])
    ref["speedup"] = 0  # a ratio to it divided by zero before speedups had their unit range
    data["rows"].append(ratio)
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data))
    _one_line_error(capsys, ["validate", "--data", str(path), "--no-sweeps"], ".speedup: expected a value in")
    path.write_text(json.dumps(_small_published_set() | {"schema_version": True}))
    _one_line_error(capsys, ["validate", "--data", str(path), "--no-sweeps"], "schema_version 1, got true")


def test_validate_data_without_a_predictable_row(tmp_path, capsys):
    """A set none of whose rows can be predicted (sd rows without their tau) is one line, not a traceback from
    summarising nothing."""
    data = _small_published_set()
    data["rows"] = [
        dict(r, tau=None, tau_derivation="withheld for this test") for r in data["rows"] if r["kind"] == "sd"
    ]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data))
    for extra in ([], ["--json"], ["--fit-all"]):
        _one_line_error(capsys, ["validate", "--data", str(path), *extra], "no row can be predicted")


def test_validate_counts_the_sources_of_its_rows(tmp_path, capsys):
    """The header counts the sources that have predictable rows, not every source the set cites."""
    data = _small_published_set()
    data["rows"] = [r for r in data["rows"] if r["source"] == "llamacpp-4766"]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "validate", "--data", str(path), "--no-sweeps")
    assert code == 0 and out.startswith("published GPU measurements: 2 predictable rows from 1 source (")


def test_a_set_without_schema_version_says_so(tmp_path, capsys):
    """`{}` was reported as "got null", as if schema_version had been given as null."""
    path = tmp_path / "set.json"
    path.write_text("{}")
    message = "expected an object with schema_version 1, got an object without one"
    _one_line_error(capsys, ["validate", "--data", str(path), "--no-sweeps"], message)
    path.write_text(json.dumps({"schema_version": None}))
    _one_line_error(capsys, ["validate", "--data", str(path), "--no-sweeps"], "schema_version 1, got null")


# --------------------------------------------------------------------------- trees and policies
def test_trees_are_capped_before_they_are_built():
    t0 = time.process_time()
    with pytest.raises(SpecsimError, match="at most 1024 nodes"):
        parse_tree("20000000")  # built 2e7 parents before raising: seconds and ~1 GB
    assert time.process_time() - t0 < 1.0
    with pytest.raises(SpecsimError, match="expected a chain of 1..1024 drafts"):
        parse_tree("chain:5000")


@pytest.mark.parametrize(
    "text, message",
    [
        ("fixed:5000", "gamma: expected an integer in 1..1024"),
        ("heuristic:5,max=2", "max: expected an integer in 5..1024"),
        ("confidence:0.4,gamma=100000", "gamma: expected an integer in 1..1024"),
        ("batch:1=5,8=3@100000", "batch size: expected an integer in 1..4096"),
        ("batch:1=5,100000=3", "batch: expected an integer in 1..4096"),
    ],
)
def test_policies_are_capped_and_say_which_value(text, message):
    with pytest.raises(SpecsimError) as err:
        parse_policy(text)
    assert message in str(err.value) and text in str(err.value)


# --------------------------------------------------------------------------- import / recommend flags
SCRAPES = [str(ENGINES / "vllm_scrape_1.prom"), str(ENGINES / "vllm_scrape_2.prom")]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--show-k", "2000"], "argument --show-k: expected an integer in 1..1024"),
        (["--images-per-prompt", "5000"], "argument --images-per-prompt: expected an integer in 0..1024"),
        (
            ["--num-speculative-tokens", "99999"],
            "argument --num-speculative-tokens: expected an integer in 1..1024",
        ),
    ],
)
def test_import_flags_are_bounded(tmp_path, capsys, extra, message):
    out = tmp_path / "p.json"
    _one_line_error(
        capsys,
        ["import", "vllm", *SCRAPES, "--method", "m", "--scenario", "s", "--out", str(out), *extra],
        message,
    )
    assert not out.exists()


def test_import_sglang_steps_are_bounded(tmp_path, capsys):
    _one_line_error(
        capsys,
        [
            "import",
            "sglang",
            str(ENGINES / "sglang_metrics.prom"),
            "--num-steps",
            "5000",
            "--method",
            "m",
            "--scenario",
            "s",
            "--out",
            str(tmp_path / "p.json"),
        ],
        "argument --num-steps: expected an integer in 1..1024",
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--gamma-max", "5000"], "--gamma-max: expected one integer in 1..1024 (gamma)"),
        (["--context", "100000000"], "--context: expected one integer in 1..16777216 (tokens)"),
        (["--min-speedup", "inf"], "argument --min-speedup: expected a finite number"),
        (["--at-batch", "100000"], "argument --at-batch: expected an integer in 1..4096"),
    ],
)
def test_recommend_flags_are_bounded(tmp_path, capsys, extra, message):
    prof = tmp_path / "p.json"
    assert (
        main(
            [
                "import",
                "vllm",
                *SCRAPES,
                "--method",
                "m",
                "--scenario",
                "s",
                "--draft",
                "org/d",
                "--out",
                str(prof),
            ]
        )
        == 0
    )
    capsys.readouterr()
    _one_line_error(
        capsys,
        ["recommend", "--engine", "vllm", "--profile", str(prof), "--pair", "llava-1.5-7b-68m", *extra],
        message,
    )


# --------------------------------------------------------------------------- calibrate flags before models
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--rel-halfwidth", "1.5"], "argument --rel-halfwidth: expected a fraction in (0, 1)"),
        (["--rel-halfwidth", "nan"], "argument --rel-halfwidth: expected a fraction in (0, 1), got 'nan'"),
        # the parser said 'a finite number in 1e-06..1e+06 (ratio)' where the help says a fraction in (0, 1)
        (["--rel-halfwidth", "0"], "argument --rel-halfwidth: expected a fraction in (0, 1), got '0'"),
        (
            ["--min-repeats", "10", "--max-repeats", "5"],
            "--min-repeats/--max-repeats: expected min <= max, got 10 and 5",
        ),
        (["--max-repeats", "3"], "--min-repeats/--max-repeats: expected min <= max, got 5 and 3"),
    ],
)
def test_latency_flags_fail_before_models_load(tmp_path, capsys, monkeypatch, extra, message):
    pytest.importorskip("torch")
    from calibrate.workload import run_setup as CL

    monkeypatch.setattr(
        CL, "latency_models", lambda args: pytest.fail("models loaded before the flags were checked")
    )
    _one_line_error(
        capsys,
        [
            "calibrate",
            "latency",
            "--target-config",
            "llava-1.5-68m",
            "--draft-config",
            "llava-1.5-68m",
            "--out",
            str(tmp_path / "p.json"),
            *extra,
        ],
        message,
    )


def test_acceptance_limit_is_an_argument_error(tmp_path, capsys):
    pytest.importorskip("torch")
    _one_line_error(
        capsys,
        [
            "calibrate",
            "acceptance",
            "--target",
            "t.json",
            "--draft",
            "d.json",
            "--limit",
            "-1",
            "--out",
            str(tmp_path / "p.json"),
        ],
        "argument --limit: expected an integer in 1..",
    )


def test_check_finds_a_missing_acceptance_entry_before_measuring(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import calibrate.measure.check_runs as CC
    from specsim.profiles import save_profile
    from tests.conftest import make_profile
    from tests.test_check import TINY

    monkeypatch.setattr(
        CC, "run_check", lambda *a, **k: pytest.fail("measured before the entry was looked up")
    )
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "x", "prompt": "def add(a, b):"}\n')
    prof = save_profile(make_profile(acceptance=()), tmp_path / "p.json")
    _one_line_error(
        capsys,
        [
            "check",
            "--profile",
            str(prof),
            "--target",
            str(cfg),
            "--draft",
            str(cfg),
            "--prompts",
            str(prompts),
            "--threads",
            "1",
            "--no-progress",
        ],
        "no acceptance entry",
    )


def test_max_memory_sizes_are_bounded():
    pytest.importorskip("torch")
    from calibrate.models.placement import parse_max_memory

    with pytest.raises(SpecsimError, match="--max-memory: cpu: expected a value in"):
        parse_max_memory("cpu=" + "9" * 400 + "GiB")  # float inf: int() raised OverflowError before the cap
    with pytest.raises(SpecsimError, match="--max-memory: cuda:0: expected a value in"):
        parse_max_memory("cuda:0=1e9TiB".replace("1e9", "9" * 20))


def test_reference_pair_cache_dir_that_is_a_file(tmp_path):
    from calibrate.models.reference_pair import REFERENCE_PAIR, fetch_model
    from specsim.presets import pair

    (tmp_path / "file").write_text("x")
    spec = pair(REFERENCE_PAIR)["gguf"]["draft"]
    with pytest.raises(SpecsimError, match="--cache-dir .*is a file, not a folder"):
        fetch_model(
            spec, tmp_path / "file" / "cache", progress=False
        )  # NotADirectoryError before, no download


def test_validate_sweep_plot_with_nothing_to_draw(tmp_path, capsys):
    """--sweep-plot with --no-sweeps, or on a set without sweeps, wrote nothing and exited 0 silently."""
    plot = str(tmp_path / "s.png")
    _one_line_error(capsys, ["validate", "--no-sweeps", "--sweep-plot", plot], "--no-sweeps leaves out")
    path = tmp_path / "set.json"
    path.write_text(json.dumps(_small_published_set()))  # batch-1 sources only
    _one_line_error(capsys, ["validate", "--data", str(path), "--sweep-plot", plot], "has no batch sweep")
    assert not (tmp_path / "s.png").exists()


def test_a_sweep_cell_where_no_batch_fits_does_not_say_never():
    from specsim.validation.batch_sweeps import describe_range

    assert describe_range(None, None, 0) == "no batch fits"
    assert describe_range(None, None, 64) == "never <=64" and describe_range(8, None, 64) == "8..64+"
