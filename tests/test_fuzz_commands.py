"""Seeded fuzzing of the commands added after the first hostile-input pass: ``validate``, ``import
vllm|sglang``, ``recommend``, ``check``'s arguments, ``hardware --runtime/--tp/--gamma/--tau/--alpha``, and
the tree and draft-length policy spec strings.

Invariant (:func:`tests.test_fuzz_inputs.check_run`): exit 0 with strict output (``--json`` parses with
NaN/Infinity refused; text has no nan/inf), or exit 2 with exactly one ``specsim: error:`` line, no
traceback, nothing on stdout and no file written. Fixed seeds: a failure replays.
"""

import copy
import json
import random
import time
from pathlib import Path

import pytest

from specsim.cli.main import main
from specsim.draft_shapes.policies import parse_policy
from specsim.draft_shapes.trees import MAX_NODES, parse_tree
from specsim.errors import SpecsimError
from specsim.hardware.model_resolution import find_shipped
from specsim.hardware.runtime import RUNTIMES_DIR
from specsim.jsonio import parse_json
from specsim.profiles import save_profile
from specsim.validation.published_set import parse_published_set
from tests.conftest import make_profile
from tests.test_fuzz_inputs import _NUMBER_ARGS, _bad_paths, check_run, mutate_json

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / "notebooks" / "data" / "engines"
PUBLISHED = ROOT / "specsim" / "data" / "published_gpu_measurements.json"
_PROM_NUMBERS = ["NaN", "+Inf", "-Inf", "1e400", "-7", "0", "9" * 400, "0.5", "x", "", "1e-400", "4e18", "12"]
_SMALL_SOURCES = (
    "llamacpp-5877",
    "llamacpp-4766",
    "vllm-29334",
    "llamacpp-3006",
)  # 7 rows: validate runs fast


def mutate_text(text: str, rng: random.Random) -> bytes:
    """One hostile edit of a Prometheus exposition (mostly on its speculative-decoding lines) or JSONL
    text."""
    lines = text.splitlines()
    spec = [i for i, line in enumerate(lines) if "spec" in line and not line.startswith("#")] or [0]
    i = rng.choice(spec)
    kind = rng.choice(
        ["number", "number", "number", "delete", "duplicate", "label", "name", "truncate", "bytes", "utf16"]
    )
    if kind == "number":
        lines[i] = f"{lines[i].rpartition(' ')[0]} {rng.choice(_PROM_NUMBERS)}"
    elif kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "label":
        lines[i] = lines[i].replace('"', rng.choice(["", '\\"', '"}{"', '""', '"\n"']), 1)
    elif kind == "name":
        lines[i] = lines[i].replace("spec", rng.choice(["spex", "", "spec spec", "spec{"]), 1)
    body = "\n".join(lines) + "\n"
    raw = body.encode()
    if kind == "truncate":
        return raw[: rng.randrange(len(raw))]
    if kind == "bytes":
        j = rng.randrange(len(raw))
        return raw[:j] + bytes([rng.randrange(256)]) + raw[j + 1 :]
    return body.encode("utf-16") if kind == "utf16" else raw


def _jsonl(text: str, rng: random.Random) -> bytes:
    lines = text.splitlines()
    j = rng.randrange(len(lines))
    lines[j] = mutate_json(json.loads(lines[j]), rng).decode("utf-8", "replace")
    return "\n".join(lines).encode()


# --------------------------------------------------------------------------- import
@pytest.mark.parametrize("seed", [0, 1])
def test_mutated_engine_metrics(seed, tmp_path, capsys):
    rng = random.Random(300 + seed)
    text = {
        n: (ENGINES / n).read_text()
        for n in ("vllm_scrape_2.prom", "sglang_metrics.prom", "sglang_responses.jsonl")
    }
    metrics = json.loads((ENGINES / "vllm_get_metrics.json").read_text())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    codes = []
    for i in range(30):
        f = tmp_path / f"m{i}"
        kind = rng.choice(["scrape", "window", "json", "gauge", "responses"])
        if kind in ("scrape", "window"):
            f.write_bytes(mutate_text(text["vllm_scrape_2.prom"], rng))
            argv = [
                "import",
                "vllm",
                *([str(ENGINES / "vllm_scrape_1.prom")] if kind == "window" else []),
                str(f),
            ]
        elif kind == "json":
            f.write_bytes(mutate_json(metrics, rng))
            argv = ["import", "vllm", str(f)]
        else:
            f.write_bytes(
                mutate_text(text["sglang_metrics.prom"], rng)
                if kind == "gauge"
                else _jsonl(text["sglang_responses.jsonl"], rng)
            )
            argv = [
                "import",
                "sglang",
                str(f),
                "--num-steps",
                rng.choice(["3", "3", "1", "0", "2000", "nan"]),
            ]
        argv += ["--method", "m", "--scenario", "s", "--out", str(out_dir / f"p{i}.json")]
        if rng.random() < 0.3:
            argv += [
                rng.choice(["--show-k", "--images-per-prompt", "--num-speculative-tokens"]),
                rng.choice(_NUMBER_ARGS),
            ]
        codes.append(check_run(capsys, argv + rng.choice([[], ["--json"]]), out_dir))
    assert 0 in codes and 2 in codes  # both paths are reached


# --------------------------------------------------------------------------- recommend
def test_recommend_arguments_and_mutated_profiles(tmp_path, capsys):
    base = tmp_path / "base.json"
    assert (
        main(
            [
                "import",
                "vllm",
                str(ENGINES / "vllm_scrape_1.prom"),
                str(ENGINES / "vllm_scrape_2.prom"),
                "--method",
                "m",
                "--scenario",
                "s",
                "--draft",
                "org/draft-68m",
                "--out",
                str(base),
            ]
        )
        == 0
    )
    capsys.readouterr()
    data = json.loads(base.read_text())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rng = random.Random(400)
    codes = []
    for i in range(30):
        path = base
        if rng.random() < 0.4:
            path = tmp_path / f"r{i}.json"
            path.write_bytes(mutate_json(data, rng))
        argv = [
            "recommend",
            "--engine",
            rng.choice(["vllm", "sglang"]),
            "--profile",
            str(path),
            "--pair",
            "llava-1.5-7b-68m",
            "--device",
            rng.choice(["h100-sxm", "a10g"]),
        ]
        if rng.random() < 0.7:
            argv += [
                rng.choice(["--batch", "--context", "--gamma-max", "--min-speedup", "--at-batch"]),
                rng.choice(_NUMBER_ARGS),
            ]
        if rng.random() < 0.2:
            argv += [rng.choice(["--out", "--config-out"]), str(out_dir / f"o{i}.json")]
        codes.append(check_run(capsys, argv + rng.choice([[], ["--json"]]), out_dir))
    assert 0 in codes and 2 in codes


# --------------------------------------------------------------------------- check (no models)
def test_check_arguments(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import calibrate.workload.run_setup as CA

    def no_models(*a, **k):  # valid arguments get this far; stop before loading anything
        raise SpecsimError("stopped before loading models")

    monkeypatch.setattr(CA, "load_setup", no_models)
    prof = save_profile(make_profile(acceptance=()), tmp_path / "p.json")
    rng = random.Random(500)
    options = [
        "--gamma",
        "--halfwidth",
        "--min-rounds",
        "--max-rounds",
        "--max-minutes",
        "--temperature",
        "--seeds",
        "--seed",
        "--max-new-tokens",
        "--limit",
        "--threads",
    ]
    for _ in range(50):
        argv = [
            "check",
            "--profile",
            str(prof),
            "--target",
            "t.json",
            "--draft",
            "d.json",
            rng.choice(options),
            rng.choice(_NUMBER_ARGS),
        ]
        argv += rng.choice([[], ["--temperature", "0.7"], ["--temperature", "1", "--json"]])
        assert check_run(capsys, argv, tmp_path) == 2


# --------------------------------------------------------------------------- hardware --runtime and flags
def test_mutated_runtimes_and_hardware_flags(tmp_path, capsys):
    rng = random.Random(600)
    runtime = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    codes = []
    for i in range(30):
        path = tmp_path / f"rt{i}.json"
        path.write_bytes(mutate_json(runtime, rng))
        argv = [
            "hardware",
            "--device",
            "h100-sxm",
            "--runtime",
            str(path) if rng.random() < 0.7 else "vllm",
            "--batch",
            "1,8",
            "--context",
            "1024",
        ]
        if rng.random() < 0.6:
            argv += [
                rng.choice(["--tp", "--gamma", "--tau", "--alpha", "--gamma-max"]),
                rng.choice(_NUMBER_ARGS),
            ]
        if rng.random() < 0.3:
            argv += ["--gamma", "4", "--tau", rng.choice(["2.5", "nan", "6", "0.5", "1e400", "-inf"])]
        codes.append(check_run(capsys, argv + rng.choice([[], ["--json"]])))
    assert 0 in codes and 2 in codes


# --------------------------------------------------------------------------- validate --data
def _small_published_set() -> dict:
    full = json.loads(PUBLISHED.read_text())
    rows = [r for r in full["rows"] if r["source"] in _SMALL_SOURCES and r.get("ratio_to") is None]
    names = {r[k] for r in rows for k in ("target", "draft") if r.get(k) and not r[k].startswith("preset:")}
    shipped = {k: find_shipped(k)[1] for k in names}  # the set's own copies of the shipped cited configs
    return {
        "schema_version": 1,
        "description": "fuzz base",
        "rows": rows,
        "sources": {k: full["sources"][k] for k in _SMALL_SOURCES},
        "models": {k: {"source": m.source, "config": copy.deepcopy(m.config)} for k, m in shipped.items()},
    }


def test_mutated_published_sets(tmp_path, capsys):
    small = _small_published_set()
    rng = random.Random(700)
    for _ in range(
        300
    ):  # the parser alone: every mutation that is still JSON parses or is one SpecsimError line
        try:
            data = parse_json(mutate_json(small, rng).decode("utf-8", "replace"), "fuzz.json")
        except SpecsimError:
            continue
        try:
            parse_published_set(data, "fuzz.json")
        except SpecsimError as err:
            assert "\n" not in str(err)
    codes = []
    for i in range(40):  # the command (each valid set runs a leave-one-source-out fit: ~0.1 s)
        path = tmp_path / f"set{i}.json"
        path.write_bytes(mutate_json(small, rng) if i else json.dumps(small).encode())
        codes.append(
            check_run(capsys, ["validate", "--data", str(path), "--no-sweeps", *rng.choice([[], ["--json"]])])
        )
    assert codes[0] == 0 and 2 in codes


# --------------------------------------------------------------------------- files of the new commands
def test_bad_paths_of_the_new_commands(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "file").write_text("x")
    prof = tmp_path / "imported.json"
    scrape = str(ENGINES / "vllm_scrape_2.prom")
    assert (
        main(
            [
                "import",
                "vllm",
                scrape,
                "--method",
                "m",
                "--scenario",
                "s",
                "--draft",
                "org/draft-68m",
                "--out",
                str(prof),
            ]
        )
        == 0
    )
    capsys.readouterr()
    named = ["--method", "m", "--scenario", "s", "--out", str(out_dir / "x.json")]
    rec = ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m"]
    for path in _bad_paths(tmp_path / "bad"):
        for argv in (
            ["validate", "--data", path, "--no-sweeps"],
            ["validate", "--runtime", path, "--no-sweeps"],
            ["hardware", "--device", "h100-sxm", "--runtime", path],
            ["import", "vllm", path, *named],
            ["import", "vllm", scrape, path, *named],
            ["import", "sglang", path, "--num-steps", "3", *named],
            [*rec, "--profile", path],
            [*rec, "--profile", str(prof), "--device", path],
        ):
            assert check_run(capsys, argv, out_dir) == 2, argv
    for path in [str(out_dir), str(out_dir / "file" / "x.json"), "", "/dev/null", "/proc/self/status/x.json"]:
        check_run(
            capsys,
            ["import", "vllm", scrape, "--method", "m", "--scenario", "s", "--out", path],
            out_dir,
            expect="--out",
        )
        for option in ("--out", "--config-out"):
            check_run(capsys, [*rec, "--profile", str(prof), option, path], out_dir, expect=option)
        for option in ("--plot", "--sweep-plot"):
            check_run(capsys, ["validate", "--no-sweeps", option, path], out_dir, expect=option)


# --------------------------------------------------------------------------- tree and policy strings
_WORDS = [
    "4",
    "2",
    "1",
    "0",
    "-1",
    "1024",
    "1025",
    "100000",
    "2000000000",
    "x",
    " ",
    "",
    "1e3",
    "0x4",
    "१",
    "²",
    "nan",
    "9" * 30,
]


def _spec_string(rng: random.Random, heads: list[str], seps: str) -> str:
    body = rng.choice(seps).join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))
    return rng.choice(heads) + body


def _bounded(fn, text: str):
    """fn(text): a value, or one SpecsimError line; within 0.2 s of CPU either way (nothing huge is built)."""
    t0 = time.process_time()
    try:
        value = fn(text)
    except SpecsimError as err:
        value = None
        assert "\n" not in str(err) and len(str(err)) < 400, text
    assert time.process_time() - t0 < 0.2, text
    return value


def test_tree_and_policy_spec_strings():
    rng = random.Random(800)
    for _ in range(300):
        tree = _bounded(parse_tree, _spec_string(rng, ["", "", "chain:", "parents:", "x:", ":"], ",,:"))
        assert tree is None or 1 <= tree.n <= MAX_NODES
        policy = _bounded(
            parse_policy,
            _spec_string(
                rng,
                [
                    "",
                    "fixed:",
                    "heuristic:",
                    "confidence:0.4,gamma=",
                    "heuristic:5,max=",
                    "batch:1=",
                    "batch:1=4@",
                ],
                ",=@",
            ),
        )
        assert policy is None or (0 <= policy.gamma <= 1024 and getattr(policy, "batch_size", 1) <= 4096)
