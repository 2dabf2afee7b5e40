"""Requests arriving at a server: seeded Poisson or Gamma arrivals, or a JSONL trace.

A workload is a :class:`Requests` (per request: arrival s from the start, prompt text tokens, images, output
tokens; sorted by arrival). Inter-arrival times: Poisson at rate λ, exponential with mean 1/λ; Gamma with
shape k (``burstiness``) and scale 1/(λ·k), mean 1/λ, CV 1/√k (``vllm bench serve --burstiness``). Every draw
comes from the caller's ``np.random.Generator``. A trace is JSONL, one request per line:
``{"arrival_s": 0.25, "prompt_tokens": 512, "images": 1, "output_tokens": 256}``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace

import numpy as np

from specsim.bounds import RANGES, check_range, interval_arg
from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, field_int, field_num, parse_json, read_line_chunks
from specsim.report import clip

TRACE_KEYS = ("arrival_s", "prompt_tokens", "images", "output_tokens")
MAX_RATES = 64
MAX_REQUESTS = 10_000_000  # a simulation holds a few arrays of this length


@dataclass(frozen=True)
class Requests:
    """A workload: arrival time (s), prompt text tokens, images and output tokens per request, by arrival."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    images: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not 1 <= n <= MAX_REQUESTS:
            raise SpecsimError(f"requests: expected 1..{MAX_REQUESTS} requests, got {n}")
        for name in ("prompt_tokens", "images", "output_tokens"):
            if len(getattr(self, name)) != n:
                raise SpecsimError(f"requests.{name}: expected {n} values (one per request)")
        if np.any(np.diff(self.arrival_s) < 0) or not np.all(np.isfinite(self.arrival_s)):
            raise SpecsimError("requests.arrival_s: expected finite times in arrival order")
        if np.any(self.output_tokens < 1):
            raise SpecsimError("requests.output_tokens: expected integers >= 1")
        if np.any(self.prompt_tokens + self.images < 1):
            raise SpecsimError("requests: every request needs at least one prompt token or image")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def from_first_arrival(self) -> Requests:
        """The same requests with times counted from the first arrival (itself when that is 0)."""
        if self.arrival_s[0] == 0:
            return self
        return replace(self, arrival_s=self.arrival_s - self.arrival_s[0])


def uniform_requests(arrival_s, prompt_tokens: int, images: int, output_tokens: int) -> Requests:
    """Requests at ``arrival_s`` that all have the same prompt tokens, images and output tokens."""
    arrival = np.asarray(arrival_s, dtype=float)
    check_range(prompt_tokens, "tokens", "prompt tokens")
    check_range(images, "images", "images")
    check_range(output_tokens, "tokens", "output tokens")
    if prompt_tokens + images < 1:  # the flags that shape every request (a trace names its rows)
        raise SpecsimError(
            "--prompt-tokens/--images: every request needs at least one prompt token or image, got 0"
        )
    n = len(arrival)
    return Requests(
        arrival,
        np.full(n, int(prompt_tokens), dtype=np.int64),
        np.full(n, int(images), dtype=np.int64),
        np.full(n, int(output_tokens), dtype=np.int64),
    )


def parse_image_mix(text: str, where: str = "--images") -> tuple[tuple[int, float], ...]:
    """'0:1,1:2,3:1' -> ((0, 0.25), (1, 0.5), (3, 0.25)): images per prompt and their share (weights
    normalised); a bare count '2' -> ((2, 1.0),). SpecsimError naming ``where`` and the bad part."""
    usage = f"{where}: expected an image count (2) or a mix IMAGES:WEIGHT,... (0:1,1:2), got {clip(text)!r}"
    pairs: dict[int, float] = {}
    for part in str(text).split(","):
        count, sep, weight = part.strip().partition(":")
        try:
            images, share = int(count), float(weight) if sep else 1.0
        except ValueError:
            raise SpecsimError(usage) from None
        if images in pairs or not (np.isfinite(share) and share > 0):
            raise SpecsimError(usage)
        check_range(images, "images", f"{where}: images")
        check_range(share, "ratio", f"{where}: weight of {images} images")
        pairs[images] = share
    total = sum(pairs.values())
    return tuple((k, v / total) for k, v in sorted(pairs.items()))


def mixed_image_requests(
    arrival_s, prompt_tokens: int, image_mix, output_tokens: int, rng: np.random.Generator
) -> Requests:
    """:func:`uniform_requests`, but each request's images drawn from ``image_mix`` ((images, share), ...)
    with ``rng`` (one draw per request, in arrival order)."""
    counts = np.array([k for k, _ in image_mix], dtype=np.int64)
    shares = np.array([w for _, w in image_mix], dtype=float)
    base = uniform_requests(arrival_s, prompt_tokens, int(counts.max()), output_tokens)
    images = rng.choice(counts, size=len(base), p=shares / shares.sum())
    return Requests(base.arrival_s, base.prompt_tokens, images.astype(np.int64), base.output_tokens)


def check_span(requests: int, rate_per_s: float, where: str = "rate") -> None:
    """SpecsimError naming ``where`` when ``requests`` arrivals at ``rate_per_s`` would span more than the
    ``arrival_s`` range (1e9 s), where a float clock no longer resolves a step's milliseconds."""
    check_range(rate_per_s, "rate_per_s", where)
    span_s, most = requests / rate_per_s, RANGES["arrival_s"][1]
    if span_s > most:
        raise SpecsimError(
            f"{where}: {rate_per_s:g} req/s spreads {requests} requests over ~{span_s:.3g} s; expected at "
            f"most {most:g} s of arrivals (a rate >= {requests / most:.3g} req/s, or fewer requests)"
        )


def _check_count_and_rate(n: int, rate_per_s: float) -> None:
    if not 1 <= n <= MAX_REQUESTS:
        raise SpecsimError(f"requests: expected 1..{MAX_REQUESTS}, got {n}")
    if not (np.isfinite(rate_per_s) and rate_per_s > 0):
        raise SpecsimError(f"rate: expected requests per second > 0, got {rate_per_s!r}")
    check_span(n, rate_per_s)


def poisson_arrivals(n: int, rate_per_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of ``n`` requests of a Poisson process at ``rate_per_s``: cumsum of Exp(1/λ)."""
    _check_count_and_rate(n, rate_per_s)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))


def gamma_arrivals(n: int, rate_per_s: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s): cumsum of Gamma(shape k = ``burstiness``, scale 1/(λ·k)) gaps (mean 1/λ)."""
    _check_count_and_rate(n, rate_per_s)
    check_range(burstiness, "burstiness", "burstiness (Gamma shape of the gaps, 1 = Poisson)")
    return np.cumsum(rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), size=n))


def arrivals(n: int, rate_per_s: float, rng: np.random.Generator, burstiness: float = 1.0) -> np.ndarray:
    """Poisson arrivals when ``burstiness`` is 1, Gamma-distributed gaps otherwise (see the module)."""
    if burstiness == 1.0:
        return poisson_arrivals(n, rate_per_s, rng)
    return gamma_arrivals(n, rate_per_s, burstiness, rng)


def _trace_line(text: str, where: str) -> tuple[float, int, int, int]:
    d = parse_json(text, where)
    if not isinstance(d, dict):
        raise SpecsimError(
            f'{where}: expected an object like {{"arrival_s": 0.5, "prompt_tokens": 512, ...}}'
        )
    check_keys(d, TRACE_KEYS, where)
    for key in ("arrival_s", "prompt_tokens", "output_tokens"):
        if key not in d:
            raise SpecsimError(f"{where}.{key}: missing")
    arrival = field_num(d["arrival_s"], f"{where}.arrival_s", lo=0.0, hi=RANGES["arrival_s"][1])
    prompt = field_int(d["prompt_tokens"], f"{where}.prompt_tokens", lo=0, unit="tokens")
    images = field_int(d.get("images", 0), f"{where}.images", lo=0, unit="images")
    output = field_int(d["output_tokens"], f"{where}.output_tokens", lo=1, unit="tokens")
    if prompt + images == 0:
        raise SpecsimError(f"{where}: expected at least one prompt token or image, got neither")
    return arrival, prompt, images, output


_KEYS = frozenset(TRACE_KEYS)
_SPAN, _TOKENS, _IMAGES = RANGES["arrival_s"][1], RANGES["tokens"][1], RANGES["images"][1]


def _plain_chunk(lines: list[str]) -> tuple[list[int], list[np.ndarray]] | None:
    """(indices of the non-blank lines, their four columns) when every line of a chunk is plainly valid
    (known keys, none twice, numbers of the right kind in range), parsed as one JSON array and checked as
    columns; None: some line needs :func:`_trace_line`, which accepts the same rows and names the problem."""
    kept = [k for k, line in enumerate(lines) if line.strip()]
    texts = [lines[k] for k in kept]
    try:
        parsed = json.loads("[" + ",".join(texts) + "]")
    except (ValueError, RecursionError):
        return None
    if len(parsed) != len(texts) or set(map(type, parsed)) - {dict}:  # "{...},{...}" on one line
        return None
    # a repeated key collapses in json.loads: its '":' is counted here, and refused by _trace_line
    if list(map(len, parsed)) != [t.count('":') for t in texts] or not set().union(*parsed) <= _KEYS:
        return None
    cols = [[d.get(k, 0 if k == "images" else None) for d in parsed] for k in TRACE_KEYS]
    if set(map(type, cols[0])) - {int, float} or any(set(map(type, c)) - {int} for c in cols[1:]):
        return None  # missing, null, a bool, a string, or a float token count
    try:
        a, p, i, o = np.asarray(cols[0], dtype=float), *(np.asarray(c, dtype=np.int64) for c in cols[1:])
    except OverflowError:
        return None
    ok = (a >= 0) & (a <= _SPAN) & (p >= 0) & (p <= _TOKENS) & (i >= 0) & (i <= _IMAGES) & (o >= 1)
    return (kept, [a, p, i, o]) if np.all(ok & (o <= _TOKENS) & (p + i > 0)) else None  # NaN fails


def _checked_lines(lines: list[str], first: int, path: str) -> tuple[list[int], list[np.ndarray]]:
    """:func:`_plain_chunk`'s answer for a chunk read line by line, the first bad line refused by name."""
    kept, rows = [], []
    for k, line in enumerate(lines):
        if line.strip():
            kept.append(k)
            rows.append(_trace_line(line, f"trace {path!r} line {first + k}"))
    cols = list(zip(*rows)) or [(), (), (), ()]
    return kept, [np.asarray(cols[0], dtype=float), *(np.asarray(c, dtype=np.int64) for c in cols[1:])]


def read_trace(path: str) -> Requests:
    """Requests from a JSONL trace file (see the module docstring), read a chunk of lines at a time and
    refused at its first bad line; blank lines are skipped; the arrival times must not decrease. Each error
    names the file's line and field."""
    chunks, last, count = [], -1.0, 0
    for first, lines in read_line_chunks(path, "trace"):
        kept, cols = _plain_chunk(lines) or _checked_lines(lines, first, path)
        times = np.concatenate([[last], cols[0]])
        back = np.flatnonzero(np.diff(times) < 0)
        if back.size:
            j = int(back[0])
            raise SpecsimError(
                f"trace {path!r} line {first + kept[j]}.arrival_s: expected arrival times in order, got "
                f"{float(times[j + 1])!r} after {float(times[j])!r}"
            )
        last, count = float(times[-1]), count + len(kept)
        chunks.append(cols)
        if count > MAX_REQUESTS:
            raise SpecsimError(f"trace {path!r}: expected at most {MAX_REQUESTS} requests")
    if not count:
        raise SpecsimError(f"trace {path!r}: expected at least one request line, got none")
    return Requests(*(np.concatenate([c[n] for c in chunks]) for n in range(4)))


rate_arg = interval_arg(*RANGES["rate_per_s"], "requests per second in [1e-06, 1e+06]")


def rates_arg(text: str) -> list[float]:
    """An argparse ``type=``: 1..MAX_RATES distinct rates, comma-separated."""
    parts = [p for p in str(text).split(",")]
    if not parts or len(parts) > MAX_RATES:
        raise argparse.ArgumentTypeError(f"expected 1..{MAX_RATES} rates like 1,2,4,8, got {clip(text)!r}")
    values = [rate_arg(p.strip()) for p in parts]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct rates, got {clip(text)!r}")
    return values


# a Gamma shape of the inter-arrival gaps (1 = Poisson)
burstiness_arg = interval_arg(*RANGES["burstiness"], "a Gamma shape in [0.001, 1000] (1 = Poisson)")
