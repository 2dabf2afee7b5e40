"""Hostile I/O: a write that fails midway (file-size limit, full disk), stdout on a full device, lone
surrogate escapes in a profile's strings, a NUL byte in a prompt's image path. Each is one
``specsim: error:`` line naming the bad value, exit 2, no traceback and nothing (half-)written."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.jsonio import check_regular_file, check_writable, field_str, parse_json, write_text_atomic
from specsim.profile_format import Profile
from specsim.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
SCRAPES = [str(ROOT / "notebooks" / "data" / "engines" / f"vllm_scrape_{i}.prom") for i in (1, 2)]
PUBLISHED = ROOT / "specsim" / "profiles" / "published" / "ibed-llava1.5-7b-68m.json"
OLD = b'{"old": "kept"}\n'
# Runs one command under a file-size limit of LIMIT bytes (SIGXFSZ ignored, so a write past it fails with
# EFBIG instead of killing the process); matplotlib and specsim are imported first, so no cache they write
# on import trips the limit.
_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
import matplotlib.font_manager
from specsim.cli.main import main
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def _env() -> dict:
    # This checkout's specsim, whatever the environment's editable install points at.
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and "Traceback" not in err, err
    err.encode("ascii", "backslashreplace").decode("ascii")  # printable as it stands
    return err


def _imported_profile(tmp_path: Path, capsys, name: str = "imported.json") -> Path:
    path = tmp_path / name
    args = ["import", "vllm", *SCRAPES, "--method", "M", "--scenario", "chat", "--out", str(path)]
    assert main(args) == 0
    capsys.readouterr()
    return path


# --------------------------------------------------------------------------- 1. a write that fails midway
def _cases(tmp_path: Path, profile: Path) -> dict:
    rec = ["recommend", "--engine", "vllm", "--profile", str(profile), "--pair", "llava-1.5-7b-68m"]
    rec += ["--context", "512", "--batch", "1,8", "--draft-model", "d"]
    imp = ["import", "vllm", *SCRAPES, "--method", "T", "--scenario", "chat"]
    return {
        "recommend --out": (rec + ["--out"], "old.json"),
        "recommend --config-out": (rec + ["--config-out"], "old.json"),
        "calibrate cpu-device --out": (["calibrate", "cpu-device", "--out"], "old.json"),
        "hardware --plot": (["hardware", "--device", "a10g", "--plot"], "old.png"),
        "validate --plot": (["validate", "--no-sweeps", "--plot"], "old.png"),
        "validate --sweep-plot": (["validate", "--sweep-plot"], "old.png"),
        "import --out": (imp + ["--out"], "imported.json"),
    }


CASES = list(_cases(Path("."), Path(".")))


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("case", CASES)
def test_a_write_past_the_file_size_limit_is_one_line_and_keeps_the_old_file(case, tmp_path, capsys):
    profile = _imported_profile(tmp_path, capsys)
    args, name = _cases(tmp_path, profile)[case]
    target = tmp_path / name
    if name != profile.name:
        target.write_bytes(OLD)
    old = target.read_bytes()
    res = subprocess.run(
        [sys.executable, "-c", _LIMITED.format(limit=16), *args, str(target)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr
    err = _one_error_line(res.stderr)
    assert repr(str(target)) in err and "File too large" in err, err
    assert target.read_bytes() == old
    assert {p.name for p in tmp_path.iterdir()} == {"imported.json", name}, "temp file left"


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_write_runtimes_past_the_file_size_limit_writes_nothing_half(tmp_path):
    folder = tmp_path / "rt"
    folder.mkdir()
    (folder / "hf-eager.json").write_bytes(OLD)
    args = ["validate", "--no-sweeps", "--fit-all", "--write-runtimes", str(folder)]
    res = subprocess.run(
        [sys.executable, "-c", _LIMITED.format(limit=16), *args], capture_output=True, text=True, env=_env()
    )
    assert res.returncode == 2, res.stderr
    err = _one_error_line(res.stderr)
    assert str(folder) in err and "File too large" in err, err
    assert os.listdir(folder) == ["hf-eager.json"] and (folder / "hf-eager.json").read_bytes() == OLD


def test_a_full_disk_at_fsync_is_one_line_and_keeps_the_old_file(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cpu.json"
    out.write_bytes(OLD)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["calibrate", "cpu-device", "--out", str(out)]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert repr(str(out)) in err and os.strerror(errno.ENOSPC) in err
    assert out.read_bytes() == OLD and os.listdir(tmp_path) == ["cpu.json"]


def test_the_writer_itself_raises_specsim_error_naming_path_and_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EDQUOT, "Disk quota")))
    with pytest.raises(SpecsimError, match=r"'.*new\.json'.*Disk quota") as err:
        write_text_atomic(tmp_path / "new.json", "{}")
    assert isinstance(err.value, OSError) and err.value.errno == errno.EDQUOT  # callers catching OSError
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- 2. stdout on a full device
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device_is_one_line_exit_2():
    code = "import sys; from specsim.cli.main import main; sys.exit(main(sys.argv[1:]))"
    with open("/dev/full", "w") as full:
        res = subprocess.run(
            [sys.executable, "-c", code, "predict", "--gamma", "3"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
    assert res.returncode == 2, res.stderr
    err = _one_error_line(res.stderr)
    assert "standard output" in err and os.strerror(errno.ENOSPC) in err, err


def test_a_closed_pipe_on_stdout_is_still_quiet():
    code = "import sys; from specsim.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "sweep", "--gamma", "1-64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    proc.stdout.close()  # the reader is gone before anything is written (like `| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait() == 0 and err == "", err


# --------------------------------------------------------------------------- 3. lone surrogate escapes
def _set(data: dict, field: str, value: str) -> None:
    *parents, last = field.replace("[0]", ".0").split(".")
    for key in parents:
        data = data[int(key)] if key.isdigit() else data[key]
    data[last] = value


SURROGATE_FIELDS = [
    "acceptance[0].method",
    "acceptance[0].scenario",
    "name",
    "provenance.source",
    "provenance.notes",
]


@pytest.mark.parametrize("field", SURROGATE_FIELDS)
def test_a_lone_surrogate_in_a_profile_string_is_refused_at_load(field, tmp_path, capsys):
    data = json.loads(PUBLISHED.read_text())
    _set(data, field, "published: M\ud800" if field == "provenance.source" else "M\ud800")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))  # ensure_ascii: the file holds the escape "\ud800"
    assert main(["predict", "--profile", str(path), "--gamma", "3"]) == 2
    captured = capsys.readouterr()
    err = _one_error_line(captured.err)
    assert field in err and "\\ud800" in err and "surrogate" in err, err
    assert captured.out == ""


def test_field_str_refuses_a_lone_surrogate_naming_the_field():
    with pytest.raises(SpecsimError) as err:
        field_str("ok\udc80", "provenance.target")
    text = str(err.value)
    assert text.startswith("provenance.target: ") and "\\udc80" in text and text.isascii()
    data = json.loads(PUBLISHED.read_text())
    data["acceptance"][0]["scenario"] = "x\udfff"  # a dict built in Python, never read from a file
    with pytest.raises(SpecsimError, match=r"acceptance\[0\]\.scenario.*\\udfff"):
        Profile.from_json(data)


def test_the_strict_reader_refuses_lone_surrogates_in_keys_and_values_but_not_pairs(tmp_path):
    with pytest.raises(SpecsimError, match=r"x\.json.*a\[1\]\.k.*\\ud800"):
        parse_json('{"a": [1, {"k": "\\ud800"}]}', "x.json")
    with pytest.raises(SpecsimError, match=r"\\udc00"):
        parse_json('{"\\udc00": 1}', "x.json")
    assert parse_json('{"e": "\\ud83d\\ude00"}', "x.json") == {"e": "\U0001f600"}
    data = json.loads(PUBLISHED.read_text())
    data["provenance"]["notes"] = "emoji \U0001f600"
    (tmp_path / "ok.json").write_text(json.dumps(data))
    assert load_profile(str(tmp_path / "ok.json")).provenance.notes == "emoji \U0001f600"


# --------------------------------------------------------------------------- 4. a NUL byte in a path
def test_a_nul_byte_in_a_prompt_image_path_names_the_prompt_and_field(tmp_path):
    from calibrate.workload.prompt_sets import load_prompts

    (tmp_path / "p.jsonl").write_text(
        json.dumps({"prompt": "x"}) + "\n" + json.dumps({"prompt": "y", "images": ["a\x00.png"]}) + "\n"
    )
    with pytest.raises(SpecsimError) as err:
        load_prompts(str(tmp_path / "p.jsonl"))
    text = str(err.value)
    assert "line 2.images[0]" in text and "'a\\x00.png'" in text and "NUL" in text and "\n" not in text


def test_a_nul_byte_in_a_prompt_image_path_is_one_line_on_the_cli(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"id": "cat", "prompt": "y", "images": ["a\x00.png"]}) + "\n"
    )
    out = tmp_path / "out.json"
    args = ["calibrate", "acceptance", "--target", "t", "--draft", "d", "--method", "M"]
    assert main([*args, "--prompts", str(tmp_path / "p.jsonl"), "--out", str(out)]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert "line 1.images[0]" in err and "NUL" in err and not out.exists()


def test_nul_bytes_in_paths_given_to_the_shared_checks_are_one_line():
    with pytest.raises(SpecsimError, match="NUL"):
        check_regular_file("a\x00b.json", "profile file")
    with pytest.raises(SpecsimError, match="NUL"):
        check_writable("a\x00b.json", "--out")
