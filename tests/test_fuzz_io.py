"""Seeded fuzzing of hostile I/O around the commands: writes cut midway by a file-size limit (``ulimit -f``),
stdout on a full device, Prometheus scrapes with a series repeated in any form, SGLang responses whose numbers
cannot come from one request. (Lone surrogate escapes are one of :func:`tests.test_fuzz_inputs.mutate_json`'s
edits, so every JSON fuzzer meets them.) ``tests/test_hostile_io.py`` and ``tests/test_engines_hostile.py``
hold one fixed case of each; these vary them.

Invariant: exit 0 with a complete output, or exit 2 with one ``specsim: error:`` line, no traceback and
nothing (half-)written. Fixed seeds: a failure replays.
"""

import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specsim.cli.main import main
from tests.test_fuzz_inputs import check_run
from tests.test_hostile_io import OLD, _cases, _env, _imported_profile, _one_error_line

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / "notebooks" / "data" / "engines"
LIMITS = [0, 1, 100, 700, 3000, 20000]  # bytes a file may grow to: before, inside and past each output


# --------------------------------------------------------------------------- a write cut midway
def _file_size_limit(limit: int):
    """preexec_fn: ``ulimit -f`` in bytes, SIGXFSZ ignored (a write past it fails with EFBIG, as with
    a shell's ulimit under a process that handles the signal)."""

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def _complete(path: Path) -> bool:
    data = path.read_bytes()
    if path.suffix == ".png":
        return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
    json.loads(data)
    return True


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_writes_cut_midway_by_a_file_size_limit(tmp_path, capsys):
    import matplotlib.font_manager  # noqa: F401  (its cache exists before a child runs under the limit)

    profile = _imported_profile(tmp_path, capsys)
    cases = _cases(tmp_path, profile)
    rng = random.Random(900)
    codes = []
    for i in range(6):
        name = rng.choice(sorted(cases))
        args, target = cases[name][0], tmp_path / f"o{i}{Path(cases[name][1]).suffix}"
        old = profile.read_bytes() if cases[name][1] == profile.name else OLD  # import merges into --out
        target.write_bytes(old)
        before = sorted(os.listdir(tmp_path))
        limit = rng.choice(LIMITS)
        res = subprocess.run(
            [sys.executable, "-m", "specsim.cli.main", *args, str(target)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            preexec_fn=_file_size_limit(limit),
            timeout=120,
        )
        assert "Traceback" not in res.stderr, (name, limit, res.stderr)
        assert sorted(os.listdir(tmp_path)) == before, (name, limit, "temp file left")
        codes.append(res.returncode)
        if res.returncode == 0:
            assert _complete(target), (name, limit)
            continue
        assert res.returncode == 2, (name, limit, res.stderr)
        err = _one_error_line(res.stderr)
        assert "File too large" in err and target.read_bytes() == old, (name, limit, err)
    assert 2 in codes


# --------------------------------------------------------------------------- stdout on a full device
def _stdout_commands(tmp_path: Path) -> list[list[str]]:
    scrapes = [str(ENGINES / f"vllm_scrape_{i}.prom") for i in (1, 2)]
    return [
        ["predict", "--gamma", "3"],
        ["predict", "--gamma", "4", "--json"],
        ["sweep", "--gamma", "1-64"],
        ["sweep", "--gamma", "1-8", "--json"],
        ["profiles"],
        ["hardware", "--list-devices", "--json"],
        ["hardware", "--device", "a10g", "--batch", "1,4", "--context", "512"],
        ["import", "vllm", *scrapes, "--method", "M", "--scenario", "s", "--out", str(tmp_path / "imp.json")],
        ["import", "sglang", str(ENGINES / "sglang_responses.jsonl"), "--num-steps", "3", "--method", "M"]
        + ["--scenario", "s", "--json", "--out", str(tmp_path / "sgl.json")],
        ["predict", "--gamma", "99"],  # an error, with stdout full too
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device_for_every_kind_of_output(tmp_path, capsys, monkeypatch):
    rng = random.Random(901)
    commands = _stdout_commands(tmp_path)
    for argv in [*commands, *(rng.choice(commands) for _ in range(4))]:
        full = open("/dev/full", "w")  # noqa: SIM115
        monkeypatch.setattr(sys, "stdout", full)
        code = main(argv)
        monkeypatch.undo()
        full.buffer.raw.close()  # what main could not write stays in the buffer (a process drops it at exit)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        err = _one_error_line(err)
        assert "standard output" in err or "--gamma" in err, (argv, err)
        for written in tmp_path.glob("*.json"):  # an output written before stdout failed is whole
            assert _complete(written), argv
        assert not list(tmp_path.glob(".*tmp*")), argv


# --------------------------------------------------------------------------- duplicate Prometheus series
def _repeat_a_series(text: str, rng: random.Random, prefix: str) -> str:
    """One series the import reads (name starts with ``prefix``, ``_created`` ones are not read) written
    twice: labels reordered, spacing and value changed, anywhere."""
    lines = text.splitlines()
    picks = [i for i, line in enumerate(lines) if line.startswith(prefix) and "_created{" not in line]
    line = lines[rng.choice(picks)]
    name, rest = line.split("{", 1)
    labels, value = rest.rsplit("}", 1)
    parts = labels.split(",")
    rng.shuffle(parts)
    sep = rng.choice([",", ", "])
    new_value = rng.choice([value.strip(), "0", "1e3", value.strip() + "0"])  # each a valid value
    copy = f"{name}{{{sep.join(parts)}}}{rng.choice([' ', '  ', chr(9)])}{new_value}"
    lines.insert(rng.randrange(len(lines) + 1), copy)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", [0, 1])
def test_a_series_repeated_in_any_form_is_refused(seed, tmp_path, capsys):
    rng = random.Random(910 + seed)
    scrape1, scrape2 = (ENGINES / f"vllm_scrape_{i}.prom" for i in (1, 2))
    gauge = (ENGINES / "sglang_metrics.prom").read_text()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for i in range(12):
        bad = tmp_path / f"d{i}.prom"
        named = ["--method", "m", "--scenario", "s", "--out", str(out_dir / "p.json")]
        kind = rng.choice(["vllm", "window", "sglang"])
        if kind == "sglang":
            bad.write_text(_repeat_a_series(gauge, rng, "sglang:spec_accept_length"))
            argv = ["import", "sglang", str(bad), "--num-steps", "3", *named]
        else:
            bad.write_text(_repeat_a_series(scrape2.read_text(), rng, "vllm:spec_decode"))
            argv = ["import", "vllm", *([str(scrape1)] if kind == "window" else []), str(bad), *named]
        check_run(capsys, argv + rng.choice([[], ["--json"]]), out_dir, expect="duplicate series")


# --------------------------------------------------------------------------- impossible SGLang requests
def _impossible(rng: random.Random, k: int) -> tuple[object, object]:
    """(completion_tokens, spec_verify_ct) that no request at --num-steps k can report."""
    steps = rng.randint(1, 40)
    return rng.choice(
        [
            (rng.randint(2, 500), 0),  # tokens with no verify step (only the prefill's one is possible)
            (rng.randint(0, steps), steps),  # fewer tokens than the prefill's one and one per step
            ((k + 1) * steps + 1 + rng.randint(1, 500), steps),  # more than k + 1 per step
            (rng.choice([-1, -(2**63), 1.5, "14", True, None, [], 1e30]), steps),
            (steps, rng.choice([-3, 2.0, "5", False, None, {}])),
        ]
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_impossible_sglang_requests_are_refused_naming_the_line(seed, tmp_path, capsys):
    rng = random.Random(920 + seed)
    good = (ENGINES / "sglang_responses.jsonl").read_text().splitlines()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for i in range(15):
        k = rng.choice([1, 3, 5])
        tokens, steps = _impossible(rng, k)
        meta = {"id": f"r{i}", "completion_tokens": tokens, "spec_verify_ct": steps}
        lines = list(good)
        at = rng.randrange(len(lines) + 1)
        lines.insert(at, json.dumps({"text": "x", "meta_info": meta}))
        path = tmp_path / f"r{i}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        argv = ["import", "sglang", str(path), "--num-steps", str(k), "--method", "m", "--scenario", "s"]
        argv += ["--out", str(out_dir / "p.json"), *rng.choice([[], ["--json"]])]
        # the good lines are possible at k >= 3 only: at k = 1 an earlier good line may be refused first
        check_run(capsys, argv, out_dir, expect=f"line {at + 1}" if k >= 3 else "line ")


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: every write fails at once, as an unbuffered pipe's would."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stdout_loses_no_acceptance_profile(tmp_path, capsys, monkeypatch):
    """calibrate acceptance printed its summary before writing --out: with a pipe closed early ('| true')
    the traces stayed in the partial file and the profile was never written, with exit status 0."""
    pytest.importorskip("torch")
    out = tmp_path / "acc.json"
    argv = ["calibrate", "acceptance", "--preset", "zoo", "--threads", "1", "--method", "M", "--limit", "1"]
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    code = main([*argv, "--max-new-tokens", "4", "--no-progress", "--out", str(out)])
    monkeypatch.undo()
    assert code == 0 and capsys.readouterr().err == ""  # a reader gone (`| head`) is no error, as elsewhere
    assert _complete(out) and [e["method"] for e in json.loads(out.read_text())["acceptance"]] == ["M"]
