"""Reading and writing specsim's files safely: one JSON reader, atomic writers, output-path checks,
and the field validators every JSON contract uses (:mod:`.reading`, :mod:`.writing`, :mod:`.fields`;
import them from here).

Every file specsim reads goes through :func:`read_json` (or :func:`read_lines`, for JSONL), every file it
writes through :func:`write_text_atomic` / :func:`write_json_atomic` / :func:`write_bytes_atomic`;
commands that write call :func:`check_writable` first. Each problem is one :class:`SpecsimError` line
naming the file and what is wrong. More: ARCHITECTURE.md, Notes by module.
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
    check_outputs,
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
    "check_outputs",
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
