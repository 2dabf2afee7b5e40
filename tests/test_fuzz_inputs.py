"""Seeded fuzzing of every input class: mutated profiles, device files and model configs, bad paths, bad
ranges.

Invariant for every run of the CLI: exit 0 with strict output (``--json`` parses with NaN/Infinity
refused; text has no nan/inf), or exit 2 with exactly one ``specsim: error:`` line on stderr, no
traceback, nothing on stdout and no output file written. Partial files and prompt sets (calibrate)
must load, restart with one warning, or raise a one-line SpecsimError. Fixed seeds: failures replay.
"""

import json
import os
import random
import re
import warnings
from pathlib import Path

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware.device import CATALOG_DIR
from specsim.profiles import save_profile, shipped_profiles
from tests.conftest import make_profile

PRESETS = Path(__file__).resolve().parent.parent / "specsim" / "presets"
_RAW = ["NaN", "-Infinity", "1e400", "9" * 400, "[" * 3000 + "]" * 3000, "-0", "1E-400"]
_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1.0,
    0.5,
    2.5,
    5e-324,
    1e-300,
    1e300,
    2**63 - 1,
    10**30,
    "",
    "x",
    [],
    [None],
    [1, 0],
    {},
    {"x": 1},
    [[[]]],
    1025,
    2**24 + 1,
]
_NUMBER_ARGS = [
    "0",
    "-1",
    "1",
    "3",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "2.5",
    "",
    " ",
    "x",
    "1-4",
    "4-1",
    "1,,2",
    ",",
    "9" * 30,
    "1-10000000000",
    "1-1024",
    "0x10",
    "1_000",
    "१",
    "1e3",
    str(2**63 - 1),
    "1-3,2-5",
]
_TEXT_NONFINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


def check_run(capsys, argv: list[str], out_dir: Path | None = None, expect: str | None = None) -> int:
    """Run the CLI once and assert the invariant of the module docstring; returns the exit status.

    ``expect``: the run must fail with this text in its error line."""
    before = sorted(os.listdir(out_dir)) if out_dir else None
    try:
        code = main(argv)
    except BaseException as err:  # any escape is a bug: a traceback for the user
        pytest.fail(f"{argv!r:.300} raised {type(err).__name__}: {err!s:.300}")
    out, err = capsys.readouterr()
    assert "Traceback" not in err, argv
    if code == 0:
        assert expect is None, (argv, "expected an error")
        if "--json" in argv:
            _strict_json(out)
        else:
            assert not _TEXT_NONFINITE.search(out), (argv, _TEXT_NONFINITE.search(out))
        return 0
    assert code == 2, (argv, code, err)
    assert expect is None or expect in err, (argv, err)
    assert err.count("\n") == 1 and err.startswith("specsim: error: "), (argv, err)
    assert out == "", (argv, out[:200])
    if out_dir is not None:
        assert sorted(os.listdir(out_dir)) == before, argv
    return 2


# --------------------------------------------------------------------------- mutations
def _paths(value, prefix=()):
    yield prefix
    items = (
        value.items() if isinstance(value, dict) else enumerate(value[:3]) if isinstance(value, list) else ()
    )
    for key, child in items:
        yield from _paths(child, prefix + (key,))


def mutate_json(data, rng: random.Random) -> bytes:
    """One hostile edit of a JSON document: a value, a deleted key, a raw literal, damaged bytes, or a lone
    surrogate escape (``\\ud800``, valid JSON text but no Unicode string) in a string value or a key."""
    data = json.loads(json.dumps(data))
    kind = rng.choice(
        ["value", "value", "value", "delete", "raw", "truncate", "bytes", "duplicate", "utf16", "surrogate"]
    )
    text = json.dumps(data, indent=1)
    if kind in ("truncate", "bytes", "utf16", "duplicate"):
        raw = text.encode()
        if kind == "truncate":
            return raw[: rng.randrange(len(raw))]
        if kind == "bytes":
            i = rng.randrange(len(raw))
            return raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
        if kind == "utf16":
            return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-8-sig"]))
        return text.replace("{", '{"schema_version": 1, ', 1).encode()
    paths = [p for p in _paths(data) if p]
    path = rng.choice(paths)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if kind == "delete":
        parent.pop(path[-1]) if isinstance(parent, dict) else parent.pop(path[-1])
        return json.dumps(data).encode()
    if kind == "surrogate":
        lone = rng.choice(["\ud800", "\udfff", "\ud83d", "x\udc00y"])
        if isinstance(parent, dict) and rng.random() < 0.3:
            parent[path[-1] + lone] = parent.pop(path[-1])  # in a key
        else:
            value = parent[path[-1]]
            parent[path[-1]] = (value if isinstance(value, str) else "") + lone
        return json.dumps(data).encode()  # ensure_ascii: the file holds the escape, as a hostile writer's
    if kind == "raw":
        parent[path[-1]] = "__RAW__"
        return json.dumps(data).replace('"__RAW__"', rng.choice(_RAW)).encode()
    parent[path[-1]] = rng.choice(_VALUES)
    return json.dumps(data).encode()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources")
    synthetic = save_profile(make_profile(), folder / "synthetic.json")
    return {
        "profiles": [
            json.loads(synthetic.read_text()),
            json.loads(shipped_profiles()["ibed-llava1.5-7b-68m"].read_text()),
        ],
        "device": json.loads((CATALOG_DIR / "h100-sxm.json").read_text()),
        "config": json.loads((PRESETS / "llava-1.5-68m.json").read_text()),
    }


_PROFILE_COMMANDS = (
    ["predict", "--gamma", "4", "--json"],
    ["predict", "--gamma", "3", "--new-tokens", "32"],
    ["sweep", "--gamma", "1-6", "--json"],
    ["predict", "--gamma", "5", "--textbook", "--json"],
    ["sweep", "--gamma", "2,5", "--alpha", "0.6"],
    ["hardware", "--device", "h100-sxm", "--batch", "1,4", "--context", "512", "--json"],
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mutated_profiles(seed, sources, tmp_path, capsys):
    rng = random.Random(seed)
    codes = []
    for i in range(60):
        path = tmp_path / f"p{i}.json"
        path.write_bytes(mutate_json(rng.choice(sources["profiles"]), rng))
        codes.append(check_run(capsys, [*rng.choice(_PROFILE_COMMANDS), "--profile", str(path)]))
    assert 2 in codes  # the fuzzer does reach the error paths


@pytest.mark.parametrize("seed", [0, 1])
def test_mutated_device_files_and_model_configs(seed, sources, tmp_path, capsys):
    rng = random.Random(100 + seed)
    for i in range(40):
        dev = tmp_path / f"d{i}.json"
        dev.write_bytes(mutate_json(sources["device"], rng))
        check_run(capsys, ["hardware", "--list-devices", "--device", str(dev), "--json"])
        check_run(capsys, ["hardware", "--device", str(dev), "--batch", "1,8", "--context", "1024"])
        cfg = tmp_path / f"c{i}.json"
        cfg.write_bytes(mutate_json(sources["config"], rng))
        check_run(
            capsys,
            [
                "hardware",
                "--target",
                "llava-1.5-7b",
                "--draft",
                str(cfg),
                "--device",
                "h100-sxm",
                "--batch",
                "1,2",
                "--context",
                "576",
                "--json",
            ],
        )


def test_bad_ranges(capsys):
    rng = random.Random(7)
    options = [
        ("predict", "--gamma", ["--json"]),
        ("predict", "--new-tokens", ["--gamma", "4", "--json"]),
        ("predict", "--context-tokens", ["--gamma", "5", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu-check"]),
        ("predict", "--alpha", ["--gamma", "3", "--json"]),
        ("sweep", "--gamma", ["--method", "M"]),
        ("hardware", "--batch", ["--device", "h100-sxm", "--json"]),
        ("hardware", "--context", ["--device", "h100-sxm", "--json"]),
        ("hardware", "--gamma-max", ["--device", "a10g", "--json"]),
    ]
    for _ in range(80):
        command, option, rest = rng.choice(options)
        check_run(capsys, [command, option, rng.choice(_NUMBER_ARGS), *rest])


def _bad_paths(tmp_path: Path) -> list[str]:
    (tmp_path / "file.json").write_text("{}")
    (tmp_path / "bin.json").write_bytes(os.urandom(64))
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop.json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    return [
        str(tmp_path),
        "/dev/null",
        str(tmp_path / "fifo.json"),
        str(tmp_path / "loop.json"),
        str(tmp_path / "dangling.json"),
        str(tmp_path / "file.json" / "x.json"),
        "",
        str(tmp_path / "bin.json"),
        str(tmp_path / "missing.json"),
        "/proc/self/status",
    ]


def test_bad_input_paths(tmp_path, capsys):
    for path in _bad_paths(tmp_path):
        for argv in (
            ["predict", "--gamma", "3", "--profile", path],
            ["hardware", "--device", path],
            ["hardware", "--target", path, "--draft", "llava-1.5-68m", "--device", "a10g"],
            ["hardware", "--device", "a10g", "--fit-profile", path],
        ):
            assert check_run(capsys, argv) == 2, argv


def test_bad_output_paths_write_nothing(tmp_path, capsys, monkeypatch):
    import specsim.hardware.device as cpu

    monkeypatch.setattr(
        cpu, "measure_cpu", lambda name="cpu": pytest.fail("measured before --out was checked")
    )
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "file").write_text("x")
    for path in [str(out_dir), str(out_dir / "file" / "p.png"), "", "/dev/null", "/proc/self/status/x.png"]:
        check_run(capsys, ["hardware", "--device", "a10g", "--plot", path], out_dir, expect="--plot")
        check_run(capsys, ["calibrate", "cpu-device", "--out", path], out_dir, expect="--out")


# --------------------------------------------------------------------------- calibrate files (torch)
def test_calibrate_arguments_and_files(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from calibrate.workload import run_setup as CL

    def no_models(args):  # valid arguments get this far; stop before loading anything
        raise SpecsimError("stopped before loading models")

    monkeypatch.setattr(CL, "latency_models", no_models)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(json.loads((PRESETS / "llava-1.5-68m.json").read_text())))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    base = ["calibrate", "latency", "--target-config", str(cfg), "--draft-config", str(cfg)]
    (tmp_path / "paths").mkdir()
    for path in [p for p in _bad_paths(tmp_path / "paths")[:7] if "dangling" not in p]:  # dangling: writable
        check_run(capsys, [*base, "--out", path], out_dir, expect="--out")
    rng = random.Random(11)
    for _ in range(40):
        option = rng.choice(
            [
                "--contexts",
                "--gammas",
                "--batch-sizes",
                "--prefill-tokens",
                "--verify-context",
                "--threads",
                "--warmup",
                "--max-repeats",
                "--seed",
                "--max-seconds-per-point",
                "--device",
                "--dtype",
            ]
        )
        value = rng.choice(_NUMBER_ARGS + ["mps", "cuda:7", "xpu", "int8"])
        assert check_run(capsys, [*base, "--out", str(out_dir / "p.json"), option, value], out_dir) == 2
    for path in ("", str(out_dir)):
        check_run(
            capsys,
            ["calibrate", "acceptance", "--target", str(cfg), "--draft", str(cfg), "--out", path],
            out_dir,
            expect="--out",
        )


def test_partial_files_and_prompt_sets(tmp_path):
    pytest.importorskip("torch")
    from calibrate.measure import acceptance_run as CA
    from calibrate.measure import latency_partial as L
    from calibrate.run.timing import Timing
    from calibrate.workload.prompt_sets import load_prompts

    rng = random.Random(23)
    identity = {"target": "t", "draft": "d", "device": "cpu", "dtype": "float32", "threads": 1}
    latency_partial = L.PartialState(identity, {"k": Timing(1.0, 0.1, 3, 0.01, (1.0, 1.0, 1.0))}).to_json()
    key = {"target": "t"}
    trace = {
        "method": "plain",
        "trace": {"prompt_id": "a", "match": [1, 0]},
        "output_tokens": [5, 6],
        "prompt_tokens": 3,
        "draft_prompt_tokens": 3,
    }
    acceptance_partial = {"schema_version": 1, "key": key, "traces": [trace, dict(trace, method="M")]}
    (tmp_path / "img.png").write_bytes(b"")
    prompt_lines = [{"id": "a", "prompt": "hi", "images": ["img.png"], "task": "t"}, {"prompt": "two"}]
    for i in range(60):
        path = tmp_path / f"x{i}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path.write_bytes(mutate_json(latency_partial, rng))
            _loads_or_one_line(lambda p=path: L.load_partial(p, identity))
            path.write_bytes(mutate_json(acceptance_partial, rng))
            _loads_or_one_line(lambda p=path: CA._read_partial(p, key))
        assert all("\n" not in str(w.message) for w in caught)
        lines = [
            mutate_json(rng.choice(prompt_lines), rng) if rng.random() < 0.5 else json.dumps(p).encode()
            for p in prompt_lines
        ]
        (tmp_path / "p.jsonl").write_bytes(b"\n".join(lines))
        _loads_or_one_line(lambda: load_prompts(str(tmp_path / "p.jsonl")))


def _loads_or_one_line(fn) -> None:
    try:
        fn()
    except SpecsimError as err:
        assert "\n" not in str(err)
