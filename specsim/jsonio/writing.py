"""Writing files safely: output paths checked before any work, atomic writes that keep permissions and
write through symlinks (the rules in :mod:`specsim.jsonio`)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from specsim.errors import SpecsimError
from specsim.jsonio.reading import dumps_json, file_kind, stat_problem


# --------------------------------------------------------------------------- writing
class WriteError(SpecsimError, OSError):
    """A write that failed on the way (full disk, quota, ``ulimit -f``): one line naming the path and the
    OS reason (a SpecsimError: exit 2 in the CLI), and still an OSError, with its ``errno``, for callers
    that catch those."""


def _nearest_existing(folder: Path) -> Path:
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def check_writable(path: str | os.PathLike | None, what: str, *, suffix: str | None = None) -> Path:
    """The file ``path`` will really be written to (symlinks followed), or a SpecsimError saying why not.

    Call it before any work: it refuses an empty path, a directory, a device/FIFO, a symlink loop, a
    read-only existing file, a parent that is a file, and a folder this process cannot create files in
    (tested by creating and removing a temp file there, which also catches read-only file systems).
    ``suffix`` (e.g. ``.png``): the format the file is written in, which its name must say.
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
        raise SpecsimError(f"{what} {text!r} {stat_problem(err)}") from None
    except ValueError:  # no file system path holds a NUL byte
        raise SpecsimError(f"{what} {text!r} contains a NUL byte; expected a file path") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise SpecsimError(f"{what} {text!r} is a directory; expected a file path")
        if not stat.S_ISREG(st.st_mode):
            raise SpecsimError(f"{what} {text!r} is {file_kind(st.st_mode)}; expected a regular file")
        if not os.access(given, os.W_OK):
            raise SpecsimError(f"{what} {text!r} is read-only")
    target = Path(os.path.realpath(given))
    folder = _nearest_existing(target.parent)
    if not folder.is_dir():
        raise SpecsimError(f"{what} {text!r}: {str(folder)!r} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specsim-probe-", dir=folder)
    except OSError as err:
        raise SpecsimError(
            f"{what} {text!r}: cannot create files in folder {str(folder)!r} ({err.strerror})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    if suffix is not None and given.suffix.lower() != suffix:
        raise SpecsimError(
            f"{what} {text!r}: expected a {suffix} file name (it is written as {suffix[1:].upper()})"
        )
    return target


def check_outputs(*outputs: tuple[str | os.PathLike | None, str, str | None]) -> None:
    """:func:`check_writable` on each (path, option, suffix) given (a None path: not asked for), and no two
    options naming one file, which the later would silently overwrite."""
    seen: dict[Path, str] = {}
    for path, what, suffix in outputs:
        if path is None:
            continue
        target = check_writable(path, what, suffix=suffix)
        if target in seen:
            shown = os.fspath(path)
            raise SpecsimError(f"{what} {shown!r}: the file {seen[target]} writes; give each its own")
        seen[target] = what


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
    0666 & ~umask. Returns ``path`` as given. A write that fails on the way (a full disk, a quota, the
    file-size limit of ``ulimit -f``, a read-only remount) is one SpecsimError naming the path and the
    OS reason; the temp file is removed, so the target is either the new file or what it was before.
    """
    tmp = None
    try:
        target = Path(os.path.realpath(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        failed = WriteError(
            f"cannot write {os.fspath(path)!r} ({reason}): nothing was written, an existing file is unchanged"
        )
        failed.errno = getattr(err, "errno", None)
        raise failed from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically (:func:`write_bytes_atomic`); text that is not valid Unicode (a
    lone surrogate, e.g. from a command-line argument that was not UTF-8) is a SpecsimError."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise SpecsimError(
            f"cannot write {os.fspath(path)!r}: its text holds {text[err.start]!r}, a lone surrogate "
            "(not a character); expected valid Unicode text"
        ) from None
    return write_bytes_atomic(path, data)


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as strict JSON (indent 1) atomically; NaN/Infinity are refused, never written."""
    return write_text_atomic(path, dumps_json(data) + "\n")
