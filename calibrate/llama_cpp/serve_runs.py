"""``specsim check --serve-rates … --runtime llama.cpp``: a seeded Poisson load sent to ``llama-server`` on
loopback by one light asyncio client, every token stamped as it streams.

Request i sends prompt i mod P at its arrival (:func:`specsim.serve.arrivals.poisson_arrivals`, seeded). A
run is a :class:`specsim.check.serve_comparison.ServedTimes`: per request arrival, first token, finish and
every token's stamp, and the server's drafts and accepted drafts. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from calibrate.llama_cpp.cpu_share import CpuShare
from calibrate.llama_cpp.server import HOST, LlamaServer, completion_body
from specsim.check.serve_comparison import ServedTimes
from specsim.errors import SpecsimError
from specsim.serve.arrivals import poisson_arrivals

SCHEMA_VERSION = 1


async def _events(reader: asyncio.StreamReader):
    """The JSON payloads of a chunked server-sent-events body."""
    buf = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            return
        buf += await reader.readexactly(size)
        await reader.readline()  # the CRLF after a chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield json.loads(line[6:])


async def _request(port: int, tokens, n: int, start: float, t0: float) -> tuple[list[float], dict]:
    """Send one streamed request at ``start`` (s after ``t0``); its token stamps and last event."""
    await asyncio.sleep(max(0.0, t0 + start - time.perf_counter()))
    body = json.dumps(completion_body(tokens, n, stream=True)).encode()
    reader, writer = await asyncio.open_connection(HOST, port)
    head = f"POST /completion HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
    writer.write((head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
    await writer.drain()
    headers = (await reader.readuntil(b"\r\n\r\n")).decode(errors="replace")
    if " 200 " not in headers.split("\r\n", 1)[0]:
        raise SpecsimError(f"llama-server answered {headers.splitlines()[0]!r}")
    stamps, last = [], {}
    async for event in _events(reader):
        now = time.perf_counter() - t0
        stamps += [now] * len(event.get("tokens") or ())
        last = event
        if event.get("stop"):
            break
    writer.close()
    return stamps, last


async def _load(port: int, prompts: list[list[int]], arrival_s, n: int):
    t0 = time.perf_counter()
    jobs = [_request(port, prompts[i % len(prompts)], n, float(a), t0) for i, a in enumerate(arrival_s)]
    return await asyncio.gather(*jobs)


def workload_arrivals(requests: int, rate_per_s: float, seed: int) -> np.ndarray:
    """The seeded Poisson arrival times (s) of one rate."""
    return poisson_arrivals(requests, rate_per_s, np.random.default_rng(seed))


def run_load(
    server: LlamaServer, prompts: list[list[int]], arrival_s, new_tokens: int
) -> tuple[ServedTimes, float]:
    """Serve the workload once; (its stamps, the client process's CPU share in cores)."""
    with CpuShare() as client:
        results = asyncio.run(_load(server.port, prompts, arrival_s, new_tokens))
    arrivals = [float(a) for a in arrival_s]
    for i, (stamps, _) in enumerate(results):
        if len(stamps) != new_tokens:
            raise SpecsimError(f"llama-server: request {i} streamed {len(stamps)} of {new_tokens} tokens")
    drafted = sum(int(last.get("timings", {}).get("draft_n", 0)) for _, last in results)
    accepted = sum(int(last.get("timings", {}).get("draft_n_accepted", 0)) for _, last in results)
    times = ServedTimes(
        arrival_s=tuple(arrivals),
        first_token_s=tuple(s[0] for s, _ in results),
        finish_s=tuple(s[-1] for s, _ in results),
        token_times_s=tuple(tuple(s) for s, _ in results),
        prompt_tokens=tuple(len(prompts[i % len(prompts)]) for i in range(len(arrivals))),
        images=tuple(0 for _ in arrivals),
        draft_tokens=drafted,
        accepted_tokens=accepted,
        sd_blocks=sum(
            new_tokens - 1 - int(last.get("timings", {}).get("draft_n_accepted", 0))
            for _, last in results
            if last.get("timings", {}).get("draft_n")
        ),
    )
    return times, client.ours
