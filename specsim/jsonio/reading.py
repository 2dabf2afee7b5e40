"""Reading files safely: regular files only, size and UTF-8 checks, strict JSON (the rules in
:mod:`specsim.jsonio`); shipped-or-user JSON file lookup."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specsim.errors import SpecsimError

MAX_FILE_BYTES = 1 << 30  # 1 GiB: far above any profile with traces; bounds memory on a wrong path
MAX_DEPTH = 64  # specsim's formats nest at most ~6 levels
MAX_LINE_BYTES = 1 << 24  # one JSONL record (a trace's request; an engine's response with its text)
_INT64_MAX = 2**63 - 1


# --------------------------------------------------------------------------- file types
def file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def stat_problem(err: OSError) -> str:
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
        raise SpecsimError(f"{what} {str(path)!r} {stat_problem(err)}") from None
    except ValueError:  # no file system path holds a NUL byte
        raise SpecsimError(f"{what} {str(path)!r} contains a NUL byte; expected a file path") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecsimError(f"{what} {str(path)!r} is {file_kind(st.st_mode)}; expected a regular file")
    return path


def _open_regular(path: str | os.PathLike, what: str, max_bytes: int):
    """A binary file object of the regular file ``path``, refused by its size before a byte is read."""
    path = check_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise SpecsimError(f"{what} {str(path)!r} {stat_problem(err)}") from None
    fh = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
        fh.close()
        raise SpecsimError(f"{what} {str(path)!r} is {file_kind(st.st_mode)}; expected a regular file")
    if st.st_size > max_bytes:
        fh.close()
        raise _too_large(path, what, max_bytes)
    return fh


def _too_large(path, what: str, max_bytes: int) -> SpecsimError:
    return SpecsimError(
        f"{what} {str(path)!r} is larger than {max_bytes} bytes (the most specsim reads); wrong file?"
    )


def read_bytes(path: str | os.PathLike, what: str, *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file, at most ``max_bytes`` (SpecsimError otherwise, from its size first)."""
    with _open_regular(path, what, max_bytes) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as err:
            raise SpecsimError(f"{what} {str(path)!r} cannot be read ({err.strerror})") from None
    if len(data) > max_bytes:  # grew after its size was read
        raise _too_large(path, what, max_bytes)
    return data


def read_line_chunks(
    path: str | os.PathLike, what: str, *, chunk_bytes: int = 1 << 20, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, lines without their breaks) of a UTF-8 text file, about ``chunk_bytes`` at a
    time (JSONL): the file's size is checked before a byte is read, each chunk decoded as it comes (an error
    names its line; a line over ``max_line_bytes`` is refused), so a bad line stops the read near it."""
    where = f"{what} {str(Path(path))!r}"
    with _open_regular(path, what, MAX_FILE_BYTES) as fh:
        first = 1
        while True:
            try:
                raws = fh.readlines(chunk_bytes)
            except OSError as err:
                raise SpecsimError(f"{where} cannot be read ({err.strerror})") from None
            if not raws:
                return
            try:
                blob = b"".join(raws)
                text = None if b"\x00" in blob or first == 1 else blob.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is None or max(map(len, raws)) > max_line_bytes:  # line by line, named (and the first
                lines = []  # chunk, for its byte-order marks); the lines before a bad one are yielded first
                for i, raw in enumerate(raws):
                    try:
                        lines.append(_line(raw, f"{where} line {first + i}", max_line_bytes))
                    except SpecsimError:
                        if lines:
                            yield first, lines
                        raise
            else:
                lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")[: len(raws)]]
            yield first, lines
            first += len(raws)


def _line(raw: bytes, where: str, max_line_bytes: int) -> str:
    if len(raw) > max_line_bytes:
        raise SpecsimError(f"{where}: longer than {max_line_bytes} bytes; expected one record per line")
    return decode_utf8(raw, where).rstrip("\r\n")


def read_lines(path: str | os.PathLike, what: str) -> Iterator[tuple[int, str]]:
    """(line number, text without its line break) of a UTF-8 text file, read as :func:`read_line_chunks`."""
    for first, lines in read_line_chunks(path, what):
        yield from enumerate(lines, start=first)


def decode_utf8(data: bytes, where: str) -> str:
    """UTF-8 text of ``data`` (a leading byte-order mark dropped); SpecsimError for other encodings."""
    if data[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise SpecsimError(
            f"{where} is UTF-16 or UTF-32 text (byte-order mark); expected UTF-8: re-save it as UTF-8"
        )
    if b"\x00" in data:
        raise SpecsimError(
            f"{where} contains NUL bytes (a binary file, or UTF-16 text?); expected UTF-8 text"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        if err.end >= len(data) and err.reason == "unexpected end of data":
            raise SpecsimError(f"{where} ends in the middle of a UTF-8 character (truncated file?)") from None
        raise SpecsimError(
            f"{where} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "binary file or another encoding?"
        ) from None


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


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text``, or None. JSON's ``\\ud800``..``\\udfff`` escapes only make a
    character in pairs; one alone is no character, so it cannot be printed or written as UTF-8."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return found.group() if found else None


def surrogate_problem(text: str, bad: str) -> str:
    """What is wrong with ``text``, which holds the lone surrogate ``bad``; ASCII, so it prints anywhere."""
    shown = ascii(text)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return (
        f"expected valid Unicode text, got {shown} (lone surrogate escape {ascii(bad)[1:-1]}: not a "
        "character; one beyond U+FFFF is written as a pair of escapes)"
    )


def _path(trail) -> str:
    """The JSON path (``a.b[2]``) of the value at the end of ``trail`` (parent, child) links, each child
    found in its parent by identity; built only when a problem is reported."""
    parts = []
    while trail is not None:
        trail, parent, child = trail
        if trail is None:  # the list wrapped around the document
            break
        if type(parent) is dict:
            key = next(k for k, x in parent.items() if x is child)
            parts.append("." + (key if key.isprintable() else ascii(key)))
        else:
            parts.append(f"[{next(i for i, x in enumerate(parent) if x is child)}]")
    return "".join(reversed(parts)).lstrip(".")


def _at(trail) -> str:
    path = _path(trail)
    return f"{path}: " if path else ""


def _scan(value: Any, allow_nan: bool = False) -> str | None:
    """The first problem json.loads lets through, prefixed with its JSON path: nesting over MAX_DEPTH, a
    float that overflowed to inf (a literal like 1e400), an integer outside int64, a lone surrogate in a
    string or key. Iterative, so deep input cannot overflow."""
    stack = [([value], 0, None)]
    while stack:
        v, d, trail = stack.pop()
        if d > MAX_DEPTH:
            return f"JSON nested too deeply (expected at most {MAX_DEPTH} levels)"
        if type(v) is dict:
            for key in v:
                bad = lone_surrogate(key)
                if bad:
                    return f"{_at(trail)}key: {surrogate_problem(key, bad)}"
        for c in v.values() if type(v) is dict else v:
            t = type(c)
            if t is dict or t is list:
                stack.append((c, d + 1, (trail, v, c)))
            elif t is str:
                bad = lone_surrogate(c)
                if bad:
                    return f"{_at((trail, v, c))}{surrogate_problem(c, bad)}"
            elif t is float and not allow_nan and not math.isfinite(c):
                return f"{_at((trail, v, c))}a number is outside a float's range (a literal like 1e400?)"
            elif t is int and not -_INT64_MAX <= c <= _INT64_MAX:
                digits = len(str(abs(c)))
                return (
                    f"{_at((trail, v, c))}integer of {digits} digits is too large "
                    "(expected at most 2**63-1 in magnitude)"
                )
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
        raise SpecsimError(
            f"{where} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
            "truncated or malformed file?"
        ) from None
    except _Refused as err:
        raise SpecsimError(f"{where}: {err}") from None
    except RecursionError:
        raise SpecsimError(f"{where}: JSON nested too deeply (expected at most {MAX_DEPTH} levels)") from None
    except ValueError:  # an integer literal beyond Python's digit limit for str -> int
        raise SpecsimError(
            f"{where}: an integer is too large (expected at most 2**63-1 in magnitude)"
        ) from None
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
        raise SpecsimError(
            f"unknown {what} {name_or_path!r} (expected a path to a .json file or one of: "
            f"{', '.join(shipped_names(folder))})"
        )
    return check_regular_file(path, f"{what} file")
