"""Where llama.cpp's binaries are and what build they are (``--llama-cpp DIR``, else ``PATH``).

A user brings their own build (README: a folder of ``llama-server``, ``llama-bench`` and
``llama-batched-bench``); nothing is built here. :func:`find_llama_cpp` checks the binaries exist and run
(``--version``) before any model loads, and :class:`LlamaCpp` carries the version, commit, compiler and
the CMake options of the build (read from ``CMakeCache.txt`` above the binaries, when it is there) into the
profile's provenance.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from specsim.errors import SpecsimError

SCHEMA_VERSION = 1
BINARIES = ("llama-server", "llama-bench", "llama-batched-bench")
# CMake options worth recording: they change what a forward costs (a backend's sub-options are left out)
_CMAKE_KEYS = re.compile(
    r"^(CMAKE_BUILD_TYPE|GGML_(NATIVE|OPENMP_ENABLED|AVAILABLE_BACKENDS|BLAS|LLAMAFILE|CPU_REPACK|AVX\w*|FMA|F16C"
    r"|CUDA|METAL|VULKAN|HIP|SYCL|OPENCL)):[A-Z]+=(.*)$"
)


@dataclass(frozen=True)
class LlamaCpp:
    """A llama.cpp build: its binaries' folder, ``version`` line (``0.5.0-dev (build 1, commit 0c1e570)``),
    ``commit``, ``compiler`` line and the CMake options that were set (name → value)."""

    bin_dir: Path
    version: str
    commit: str
    compiler: str = ""
    cmake: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def path(self, name: str) -> str:
        """The full path of binary ``name``."""
        return str(self.bin_dir / name)

    def software(self) -> dict[str, str]:
        """What the profile's provenance records of this build."""
        flags = " ".join(f"{k}={v}" for k, v in sorted(self.cmake.items()))
        out = {"llama.cpp": self.version, "llama.cpp commit": self.commit}
        if self.compiler:
            out["llama.cpp compiler"] = self.compiler
        if flags:
            out["llama.cpp build flags"] = flags
        return out


_UPSTREAM_VERSION = r"version:\s*\S+\s+\(([0-9a-f]{6,40})\)"


def parse_version(text: str) -> tuple[str, str, str]:
    """(version, commit, compiler) from a binary's ``--version`` output; SpecsimError when absent."""
    ver = re.search(r"version:\s*(.+)", text)
    # this project's build prints 'version: 0.5.0-dev (build 1, commit HASH)'; upstream 'version: 4567 (HASH)'
    commit = re.search(r"commit\s+([0-9a-f]{6,40})", text) or re.search(_UPSTREAM_VERSION, text)
    if ver is None or commit is None:
        expected = "'version: N (HASH)' or 'version: ... commit HASH'"
        raise SpecsimError(f"llama.cpp --version: expected {expected}, got {text[:120]!r}")
    built = re.search(r"built with (.+)", text)
    return ver.group(1).strip(), commit.group(1), "" if built is None else built.group(1).strip()


def parse_cmake_cache(text: str) -> dict[str, str]:
    """The options of a ``CMakeCache.txt`` that change a forward's cost (build type, CPU features, backends,
    OpenMP, BLAS) and are set (a value other than OFF or empty)."""
    out = {}
    for line in text.splitlines():
        m = _CMAKE_KEYS.match(line.strip())
        if m and m.group(3) not in ("", "OFF"):
            out[m.group(1)] = m.group(3)
    return out


def find_llama_cpp(path: str | None) -> LlamaCpp:
    """The build in folder ``path`` (its ``bin/`` too), or on ``PATH`` when None; SpecsimError naming what is
    missing (one line, before any model loads)."""
    where = "--llama-cpp"
    if path is None:
        found = shutil.which(BINARIES[0])
        if found is None:
            raise SpecsimError(
                f"{where}: llama-server is not on PATH; give {where} DIR, the folder of a llama.cpp build's "
                "binaries (README, 'llama.cpp: calibrate and check an engine this project did not write', "
                "says how to build them)"
            )
        bin_dir = Path(found).resolve().parent
    else:
        bin_dir = Path(path).expanduser()
        if not bin_dir.is_dir():
            raise SpecsimError(f"{where}: {path!r} is not a folder")
        if not (bin_dir / BINARIES[0]).exists() and (bin_dir / "bin" / BINARIES[0]).exists():
            bin_dir = bin_dir / "bin"
    missing = [b for b in BINARIES if not (bin_dir / b).is_file()]
    if missing:
        raise SpecsimError(f"{where}: {str(bin_dir)!r} has no {', '.join(missing)} (build them: README)")
    try:
        proc = subprocess.run(
            [str(bin_dir / BINARIES[0]), "--version"], capture_output=True, text=True, timeout=60
        )
    except OSError as err:
        raise SpecsimError(f"{where}: {bin_dir / BINARIES[0]} does not run: {err}") from None
    except subprocess.TimeoutExpired:
        raise SpecsimError(f"{where}: {bin_dir / BINARIES[0]} --version did not answer within 60 s") from None
    version, commit, compiler = parse_version(proc.stdout + proc.stderr)
    cache = bin_dir.parent / "CMakeCache.txt"
    cmake = parse_cmake_cache(cache.read_text(errors="replace")) if cache.is_file() else {}
    return LlamaCpp(bin_dir.resolve(), version, commit, compiler, cmake)
