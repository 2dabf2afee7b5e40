"""Reading and writing specsim's files safely: one JSON reader, atomic writers, output-path checks,
and the field validators every JSON contract uses.

Every file specsim reads goes through :func:`read_json` (or :func:`read_text` for JSONL), and every
file it writes through :func:`write_text_atomic` / :func:`write_json_atomic` /
:func:`write_bytes_atomic`. Commands that write call :func:`check_writable` before any work. Each
problem is one :class:`SpecsimError` line naming the file and what is wrong.

What the reader refuses (before or while parsing):

- anything but a regular file: a directory, ``/dev/null`` or another device, a FIFO (checked before
  opening, and opened non-blocking so a swapped-in FIFO cannot hang), a socket, a symlink loop;
- files over :data:`MAX_FILE_BYTES`; text that is not UTF-8 (binary, UTF-16, truncated mid-character;
  a UTF-8 byte-order mark is allowed and skipped, RFC 8259 §8.1);
- JSON nested deeper than :data:`MAX_DEPTH`, NaN/Infinity literals, numbers outside a float's
  range, integers outside int64, and duplicate keys in one object (which value was meant is ambiguous).

Writers keep what the user had: an existing file keeps its permission bits, a new file gets the
umask's (0666 & ~umask), and a path that is a symlink is written through to the link's target.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specsim.bounds import check_range
from specsim.errors import SpecsimError

MAX_FILE_BYTES = 1 << 30  # 1 GiB: far above any profile with traces; bounds memory on a wrong path
MAX_DEPTH = 64            # specsim's formats nest at most ~6 levels
_INT64_MAX = 2**63 - 1


# --------------------------------------------------------------------------- file types
def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _stat_problem(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "does not exist"
    if err.errno == errno.ELOOP:
        return "is a symlink loop"
    if err.errno == errno.ENOTDIR:
        return "does not exist (a parent in its path is a file, not a folder)"
    return f"cannot be read ({err.strerror})"


def check_regular_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` if it names a regular file (symlinks followed); SpecsimError naming what it is otherwise.

    Only ``stat`` is used: a FIFO or device is rejected without being opened.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as err:
        raise SpecsimError(f"{what} {str(path)!r} {_stat_problem(err)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecsimError(f"{what} {str(path)!r} is {_kind(st.st_mode)}; expected a regular file")
    return path


def read_bytes(path: str | os.PathLike, what: str, *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file, at most ``max_bytes`` (SpecsimError otherwise)."""
    path = check_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise SpecsimError(f"{what} {str(path)!r} {_stat_problem(err)}") from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the check and the open
            raise SpecsimError(f"{what} {str(path)!r} is {_kind(mode)}; expected a regular file")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as err:
            raise SpecsimError(f"{what} {str(path)!r} cannot be read ({err.strerror})") from None
    if len(data) > max_bytes:
        raise SpecsimError(f"{what} {str(path)!r} is larger than {max_bytes} bytes (the most specsim reads); "
                           "wrong file?")
    return data


def decode_utf8(data: bytes, where: str) -> str:
    """UTF-8 text of ``data`` (a leading byte-order mark dropped); SpecsimError for other encodings."""
    if data[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise SpecsimError(f"{where} is UTF-16 or UTF-32 text (byte-order mark); expected UTF-8: re-save it as UTF-8")
    if b"\x00" in data:
        raise SpecsimError(f"{where} contains NUL bytes (a binary file, or UTF-16 text?); expected UTF-8 JSON text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        if err.end >= len(data) and err.reason == "unexpected end of data":
            raise SpecsimError(f"{where} ends in the middle of a UTF-8 character (truncated file?)") from None
        raise SpecsimError(f"{where} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
                           "binary file or another encoding?") from None


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of a regular file (see the module docstring for what is refused)."""
    return decode_utf8(read_bytes(path, what), f"{what} {str(Path(path))!r}")


# --------------------------------------------------------------------------- JSON
class _Refused(ValueError):
    """A value the JSON hooks refuse (raised inside json.loads, turned into one SpecsimError line)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key!r} in one object (which value is meant is ambiguous)")
        out[key] = value
    return out


def _refuse_constant(name: str):
    raise _Refused(f"{name} is not a JSON number (expected finite numbers)")


def _scan(value: Any, allow_nan: bool = False) -> str | None:
    """The first problem json.loads lets through: nesting over MAX_DEPTH, a float that overflowed to
    inf (a literal like 1e400), an integer outside int64. Iterative, so deep input cannot overflow."""
    stack = [([value], 0)]
    while stack:
        v, d = stack.pop()
        if d > MAX_DEPTH:
            return f"JSON nested too deeply (expected at most {MAX_DEPTH} levels)"
        for c in (v.values() if type(v) is dict else v):
            t = type(c)
            if t is dict or t is list:
                stack.append((c, d + 1))
            elif t is float and not allow_nan and not math.isfinite(c):
                return "a number is outside a float's range (a literal like 1e400?)"
            elif t is int and not -_INT64_MAX <= c <= _INT64_MAX:
                digits = len(str(abs(c)))
                return f"integer of {digits} digits is too large (expected at most 2**63-1 in magnitude)"
    return None


def parse_json(text: str, where: str, *, allow_nan: bool = False) -> Any:
    """Strict JSON (see the module docstring); ``where`` names the source in errors.

    ``allow_nan`` lets NaN/Infinity through, for other tools' dumps (vLLM's ``get_metrics`` writes
    NaN for idle gauges) whose readers check every value they use.
    """
    constant = float if allow_nan else _refuse_constant
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=constant)
    except json.JSONDecodeError as err:
        raise SpecsimError(f"{where} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                           "truncated or malformed file?") from None
    except _Refused as err:
        raise SpecsimError(f"{where}: {err}") from None
    except RecursionError:
        raise SpecsimError(f"{where}: JSON nested too deeply (expected at most {MAX_DEPTH} levels)") from None
    except ValueError:  # an integer literal beyond Python's digit limit for str -> int
        raise SpecsimError(f"{where}: an integer is too large (expected at most 2**63-1 in magnitude)") from None
    problem = _scan(value, allow_nan)
    if problem:
        raise SpecsimError(f"{where}: {problem}")
    return value


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse the JSON file at ``path``; ``what`` names it in errors (e.g. "profile", "device file")."""
    return parse_json(read_text(path, what), f"{what} {str(Path(path))!r}")


def dumps_json(data: Any, *, indent: int | None = 1) -> str:
    """Strict JSON text (SpecsimError instead of writing NaN/Infinity, which is not JSON)."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False)
    except ValueError as err:
        raise SpecsimError(f"refusing to write non-finite numbers as JSON ({err})") from None


def check_schema_version(d: Any, expected: int, where: str) -> int:
    """``expected`` when ``d`` is an object whose ``schema_version`` is exactly that integer; SpecsimError
    otherwise (``true`` and ``1.0`` equal 1 in Python, but no writer of this format wrote them)."""
    version = d.get("schema_version") if isinstance(d, dict) else None
    if type(version) is not int or version != expected:
        got = show(version) if isinstance(d, dict) else f"{type(d).__name__} {show(d)}"
        raise SpecsimError(f"{where}: expected an object with schema_version {expected}, got {got}")
    return version


def check_keys(d: dict, allowed: Iterable[str], where: str) -> None:
    """SpecsimError naming the first key of ``d`` that is not in ``allowed``."""
    allowed = set(allowed)
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SpecsimError(f"{where}: unknown field {unknown[0]!r} (expected one of {sorted(allowed)})")


def parse_file_data(data: Any, path: Path, what: str, parse):
    """``parse(data)`` of a file's JSON, its errors prefixed with ``<what> file <name>:``."""
    try:
        return parse(data)
    except SpecsimError as err:
        raise SpecsimError(f"{what} file {path.name}: {err}") from None


def shipped_names(folder: Path) -> list[str]:
    """Names of the shipped JSON files in ``folder`` (file stems), sorted."""
    return sorted(p.stem for p in folder.glob("*.json"))


def shipped_or_user_file(name_or_path: str, folder: Path, what: str) -> Path:
    """``folder/<name>.json`` for a shipped name, else the user's JSON file at ``name_or_path`` (a regular
    file); SpecsimError naming the shipped names when it is neither."""
    path = folder / f"{name_or_path}.json"
    if path.is_file():
        return path
    path = Path(name_or_path)
    if not (path.suffix == ".json" or os.sep in name_or_path or os.path.lexists(path)):
        raise SpecsimError(f"unknown {what} {name_or_path!r} (expected a path to a .json file or one of: "
                           f"{', '.join(shipped_names(folder))})")
    return check_regular_file(path, f"{what} file")


def sourced(q: Any, where: str, source_hint: str) -> tuple[Any, str]:
    """(value, source) of a ``{"value": ..., "source": "..."}`` entry; errors name the field, and
    ``source_hint`` says what a source is (a datasheet, a paper, a fit command)."""
    if not isinstance(q, dict) or "value" not in q:
        raise SpecsimError(f"{where}: expected {{\"value\": number, \"source\": \"...\"}}, got {q!r}")
    source = q.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SpecsimError(f"{where}.source: expected {source_hint}, got {source!r}")
    return q["value"], source


def check_object(d: Any, allowed: Iterable[str], where: str, *, schema_version: int | None = None) -> dict:
    """``d`` when it is a JSON object with only ``allowed`` keys (and, when given, exactly that integer
    ``schema_version``); SpecsimError naming ``where`` and the bad key or value otherwise."""
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected a JSON object, got {type(d).__name__}")
    check_keys(d, allowed, where)
    version = d.get("schema_version")
    if schema_version is not None and (type(version) is not int or version != schema_version):
        # true == 1 and 1.0 == 1 in Python, but no writer of these files wrote them.
        raise SpecsimError(f"{where}.schema_version: expected {schema_version}, got {version!r}")
    return d


# --------------------------------------------------------------------------- writing
def _nearest_existing(folder: Path) -> Path:
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def check_writable(path: str | os.PathLike | None, what: str) -> Path:
    """The file ``path`` will really be written to (symlinks followed), or a SpecsimError saying why not.

    Call it before any work: it refuses an empty path, a directory, a device/FIFO, a symlink loop, a
    read-only existing file, a parent that is a file, and a folder this process cannot create files in
    (tested by creating and removing a temp file there, which also catches read-only file systems).
    """
    text = "" if path is None else os.fspath(path)
    if not str(text).strip():
        raise SpecsimError(f"{what}: expected a file path, got {text!r}")
    given = Path(text)
    try:
        st = os.stat(given)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise SpecsimError(f"{what} {text!r} {_stat_problem(err)}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise SpecsimError(f"{what} {text!r} is a directory; expected a file path")
        if not stat.S_ISREG(st.st_mode):
            raise SpecsimError(f"{what} {text!r} is {_kind(st.st_mode)}; expected a regular file")
        if not os.access(given, os.W_OK):
            raise SpecsimError(f"{what} {text!r} is read-only")
    target = Path(os.path.realpath(given))
    folder = _nearest_existing(target.parent)
    if not folder.is_dir():
        raise SpecsimError(f"{what} {text!r}: {str(folder)!r} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specsim-probe-", dir=folder)
    except OSError as err:
        raise SpecsimError(f"{what} {text!r}: cannot create files in folder {str(folder)!r} ({err.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return target


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no thread-safe way to read it; set and restore at once
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` via a temp file beside the target and a rename (never half-written).

    A symlink is written through to its target; an existing file keeps its mode, a new one gets
    0666 & ~umask. Returns ``path`` as given.
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically (:func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as strict JSON (indent 1) atomically; NaN/Infinity are refused, never written."""
    return write_text_atomic(path, dumps_json(data) + "\n")
# --------------------------------------------------------------------------- field validators
# Shared by every JSON contract (profiles, cost models, devices): each names the field and the bad value.
def show(value: Any) -> str:
    """A short rendering of a bad value for an error message (at most 60 characters)."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_req(d: Any, key: str, where: str) -> Any:
    """``d[key]``; SpecsimError when ``d`` is not an object or the key is missing."""
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object, got {show(d)}")
    if key not in d:
        raise SpecsimError(f"{where}.{key}: missing")
    return d[key]


def field_num(value: Any, where: str, *, lo: float | None = None, hi: float | None = None,
              lo_open: bool = False, unit: str | None = None, zero_ok: bool = False) -> float:
    """A finite number within [lo, hi] (lo excluded when ``lo_open``) and, when ``unit`` is given,
    within that unit's plausible range (:mod:`specsim.bounds`; 0 also allowed when ``zero_ok``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecsimError(f"{where}: expected a finite number, got {show(value)}")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise SpecsimError(f"{where}: expected {'>' if lo_open else '>='} {lo}, got {show(value)}")
    if hi is not None and value > hi:
        raise SpecsimError(f"{where}: expected <= {hi}, got {show(value)}")
    if unit is not None:
        check_range(value, unit, where, zero_ok=zero_ok)
    return float(value)


def field_int(value: Any, where: str, *, lo: int | None = None, unit: str | None = None) -> int:
    """An integer (not a bool) >= lo and, when ``unit`` is given, within its range (:mod:`specsim.bounds`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecsimError(f"{where}: expected an integer, got {show(value)}")
    if lo is not None and value < lo:
        raise SpecsimError(f"{where}: expected an integer >= {lo}, got {show(value)}")
    if unit is not None:
        check_range(value, unit, where)
    return value


def field_str(value: Any, where: str, *, allow_empty: bool = False) -> str:
    """A (non-empty unless ``allow_empty``) string."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecsimError(f"{where}: expected a non-empty string, got {show(value)}")
    return value


def field_list(value: Any, where: str, *, nonempty: bool = True) -> list:
    """A (non-empty) JSON list."""
    if not isinstance(value, list) or (nonempty and not value):
        raise SpecsimError(f"{where}: expected a {'non-empty ' if nonempty else ''}list, got {show(value)}")
    return value


def field_opt(d: dict, key: str, parse, where: str):
    """``parse(d[key], where.key)``, or None when the key is absent or null."""
    value = d.get(key)
    return None if value is None else parse(value, f"{where}.{key}")


def drop_none(d: dict) -> dict:
    """``d`` without its None values (optional fields are omitted from JSON)."""
    return {k: v for k, v in d.items() if v is not None}
