"""specsim.jsonio: every unreadable file is one line naming it; atomic writes keep mode and symlinks."""

import json
import os
import stat
import subprocess
import sys

import pytest

from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, read_json, write_bytes_atomic, write_json_atomic, write_text_atomic
from specsim.profiles import load_profile, save_profile


def _one_line_error(fn, *args) -> str:
    with pytest.raises(SpecsimError) as err:
        fn(*args)
    message = str(err.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- reading
@pytest.mark.parametrize(
    "content, expected",
    [
        (b"\x89PNG\r\n\x1a\n\xff\xfe binary", "not UTF-8 text"),
        ('{"a": 1}'.encode("utf-16"), "UTF-16"),
        ('{"a": 1}'.encode("utf-16-le"), "NUL bytes"),
        ('{"name": "caf\u00e9"}'.encode()[:-3], "ends in the middle of a UTF-8 character"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b"[" * 100 + b"]" * 100, "nested too deeply"),
        (b'{"tau": ' + b"9" * 400 + b"}", "integer of 400 digits is too large"),
        (b'{"tau": ' + b"9" * 5000 + b"}", "integer is too large"),
        (b'{"tau": 1e400}', "outside a float's range"),
        (b'{"tau": NaN}', "NaN is not a JSON number"),
        (b'{"tau": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"tau": 2.0, "tau": 3.0}', "duplicate key 'tau'"),
    ],
    ids=[
        "binary",
        "utf16-bom",
        "utf16-no-bom",
        "truncated-utf8",
        "deep-5000",
        "deep-100",
        "int-400-digits",
        "int-5000-digits",
        "float-overflow",
        "nan",
        "-infinity",
        "duplicate-key",
    ],
)
def test_bad_content_is_one_line_naming_the_file(tmp_path, content, expected):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    message = _one_line_error(read_json, path, "profile")
    assert expected in message and "p.json" in message


def test_utf8_bom_is_accepted(tmp_path, profile):
    path = save_profile(profile, tmp_path / "p.json")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_profile(str(path)) == profile


def test_special_paths_are_one_line(tmp_path):
    assert "is a directory" in _one_line_error(load_profile, str(tmp_path))
    assert "character device" in _one_line_error(load_profile, "/dev/null")
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert "symlink loop" in _one_line_error(load_profile, str(loop))
    (tmp_path / "file").write_text("x")
    assert "a parent in its path is a file" in _one_line_error(
        load_profile, str(tmp_path / "file" / "p.json")
    )


def test_fifo_is_refused_without_hanging(tmp_path):
    """A FIFO with no writer would block open() forever; the reader must refuse it from its type."""
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "specsim.cli.main", "predict", "--gamma", "3", "--profile", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("is a FIFO (named pipe); expected a regular file")
    assert proc.stderr.count("\n") == 1


# --------------------------------------------------------------------------- writing
def test_new_files_get_the_umask_mode(tmp_path, profile):
    old = os.umask(0o027)
    try:
        path = save_profile(profile, tmp_path / "p.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0666 & ~027 (mkstemp alone gives 0600)


def test_existing_file_keeps_its_mode(tmp_path, profile):
    path = tmp_path / "p.json"
    path.write_text("{}")
    path.chmod(0o664)
    save_profile(profile, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664
    assert load_profile(str(path)) == profile


def test_symlinked_out_is_written_through(tmp_path, profile):
    real_dir = tmp_path / "shared"
    real_dir.mkdir()
    target = real_dir / "p.json"
    target.write_text("{}")
    target.chmod(0o644)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    save_profile(profile, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load_profile(str(target)) == profile and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in real_dir.iterdir()) == ["p.json"]  # no temp file left


def test_writers_refuse_nan_and_leave_nothing(tmp_path):
    path = tmp_path / "x.json"
    assert "non-finite" in _one_line_error(write_json_atomic, path, {"tau": float("nan")})
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_text_and_bytes_writers(tmp_path):
    write_text_atomic(tmp_path / "a" / "t.txt", "héllo")
    write_bytes_atomic(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "a" / "t.txt").read_text(encoding="utf-8") == "héllo"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"


def _read_only_dir(tmp_path):
    """A folder this process cannot create files in: chmod for a normal user, /sys for root."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro
    try:  # root ignores permission bits; /sys refuses new files even to root
        fd = os.open("/sys/.specsim-probe", os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        return "/sys"
    os.close(fd)
    os.unlink("/sys/.specsim-probe")
    pytest.skip("no read-only folder available to root here")


def test_check_writable(tmp_path):
    (tmp_path / "file").write_text("x")
    assert check_writable(tmp_path / "new" / "p.json", "--out") == tmp_path / "new" / "p.json"
    assert not (tmp_path / "new").exists()  # checking creates nothing
    cases = {
        str(tmp_path): "is a directory",
        "": "expected a file path",
        "/dev/null": "character device",
        str(tmp_path / "file" / "p.json"): "is a file, not a folder",
        os.path.join(_read_only_dir(tmp_path), "p.json"): "cannot create files in folder",
    }
    for path, expected in cases.items():
        message = _one_line_error(check_writable, path, "--out")
        assert message.startswith("--out") and expected in message
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name == "ro") == ["file"]


def test_json_errors_keep_line_and_column(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"a": 1})[:-1])
    assert "line 1, column 8" in _one_line_error(read_json, path, "profile")
