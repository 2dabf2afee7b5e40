"""Reading and writing specsim's files safely: one JSON reader, atomic writers, output-path checks,
and the field validators every JSON contract uses (:mod:`.reading`, :mod:`.writing`, :mod:`.fields`;
import them from here).

Every file specsim reads goes through :func:`read_json` (or :func:`read_lines`, a line at a time, for
JSONL), and every file it writes through :func:`write_text_atomic` / :func:`write_json_atomic` /
:func:`write_bytes_atomic`. Commands that write call :func:`check_writable` before any work. Each
problem is one :class:`SpecsimError` line naming the file and what is wrong.

What the reader refuses (before or while parsing):

- anything but a regular file: a directory, ``/dev/null`` or another device, a FIFO (checked before
  opening, and opened non-blocking so a swapped-in FIFO cannot hang), a socket, a symlink loop;
- files over :data:`MAX_FILE_BYTES` (by their size, before a byte is read); text that is not UTF-8
  (binary, UTF-16, truncated mid-character; a UTF-8 byte-order mark is allowed and skipped, RFC 8259 §8.1);
- JSON nested deeper than :data:`MAX_DEPTH`, NaN/Infinity literals, numbers outside a float's
  range, integers outside int64, duplicate keys in one object (which value was meant is ambiguous),
  and lone surrogate escapes (``"\\ud800"`` without its pair: no character, so it could be neither
  printed nor written as UTF-8) in a string or key; errors inside the document name its JSON path.

A path holding a NUL byte is refused by name. Writers keep what the user had: an existing file keeps its
permission bits, a new file gets the umask's (0666 & ~umask), and a path that is a symlink is written
through to the link's target. A write that fails on the way (a full disk, ``ulimit -f``) is one
SpecsimError naming the path and the OS reason; the temp file is removed and the old file left as it was.
"""

from specsim.jsonio.fields import (
    check_keys,
    check_object,
    check_schema_version,
    drop_none,
    few,
    field_int,
    field_list,
    field_nested,
    field_num,
    field_opt,
    field_req,
    field_str,
    parse_file_data,
    show,
    sourced,
)
from specsim.jsonio.reading import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_LINE_BYTES,
    check_regular_file,
    decode_utf8,
    dumps_json,
    lone_surrogate,
    parse_json,
    read_bytes,
    read_json,
    read_line_chunks,
    read_lines,
    read_text,
    shipped_names,
    shipped_or_user_file,
)
from specsim.jsonio.writing import (
    WriteError,
    check_writable,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "WriteError",
    "check_keys",
    "check_object",
    "check_regular_file",
    "check_schema_version",
    "check_writable",
    "decode_utf8",
    "drop_none",
    "dumps_json",
    "field_int",
    "field_list",
    "field_nested",
    "field_num",
    "field_opt",
    "field_req",
    "field_str",
    "few",
    "lone_surrogate",
    "parse_file_data",
    "parse_json",
    "read_bytes",
    "read_json",
    "read_line_chunks",
    "read_lines",
    "read_text",
    "shipped_names",
    "shipped_or_user_file",
    "show",
    "sourced",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]
