"""Discrete-event simulation of an inference server with continuous batching and speculative decoding.

One step after another (vLLM V1's engine loop): the scheduler (:mod:`.scheduler`) picks decodes and prefill
chunks, γ comes from the policy at the decode batch B, each decoding request accepts a of its γ drafts and
emits a + 1 tokens at the step's end; the step lasts :func:`.step_cost.step_ms`. KV length before a step =
prompt positions + emitted tokens − 1 (+ rejected drafts where ``keeps_rejected_drafts``). Time: s from the
start (arrivals), ms (costs). Decode-only runs are advanced together (:func:`_fast_forward`).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.serve.arrivals import Requests
from specsim.serve.scheduler import SchedulerConfig, schedule_step
from specsim.serve.speculation import AcceptanceSource
from specsim.serve.step_cost import StepCost, decode_steps_ms, step_ms

MAX_FAST_FORWARD_STEPS = 512
LONG_AFTER = 1 << 30  # steps since an admission before the first one: none has warm-up left


@dataclass(frozen=True)
class StepRecord:
    """One simulated step (kept only when recording): start and end (s), γ, the decoding requests, their
    accepted drafts and emitted tokens, and the prefill chunks (request, first position, tokens, images)."""

    start_s: float
    end_s: float
    gamma: int
    decode: tuple[int, ...]
    accepted: tuple[int, ...]
    emitted: tuple[int, ...]
    chunks: tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class ServeRun:
    """What a simulation produced: per-request first-token and finish times (s), ITL gaps (ms, one per
    emission after the first token) and the count of tokens emitted at a gap of 0, step and SD counters,
    and (when recorded) every step."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    itl_gaps_ms: np.ndarray
    itl_zero_tokens: int
    steps: int
    busy_s: float
    draft_tokens: int
    accepted_tokens: int
    sd_blocks: int
    step_log: tuple[StepRecord, ...] | None = None
    max_context_tokens: int = 0  # the widest KV cache a decode step was priced at
    mean_decode_batch: float = 0.0  # requests decoding per step that decodes

    def token_times_s(self, request: int) -> list[float]:
        """Each output token's emission time (s) of ``request``: its first token, then every decode step's
        tokens at that step's end (needs a recorded run)."""
        if self.step_log is None:
            raise SpecsimError("token times: the run was not recorded (simulate(..., record=True))")
        times = [float(self.first_token_s[request])]
        for step in self.step_log:
            if request in step.decode:
                times.extend([step.end_s] * step.emitted[step.decode.index(request)])
        return times


class _State:
    """Per-request progress arrays of a running simulation."""

    def __init__(self, requests: Requests, image_tokens: int, max_gamma: int, keeps_rejected: bool):
        n = len(requests)
        self.prompt_total = requests.prompt_tokens + requests.images * image_tokens
        self.output = requests.output_tokens
        self.kv_need = self.prompt_total + self.output + max_gamma
        self.computed = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.first_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.last_emit_s = np.zeros(n)
        self.keeps_rejected = keeps_rejected  # the cost's engine keeps rejected drafts as cache columns
        self.rejected = np.zeros(n, dtype=np.int64)  # drafts rejected so far (counted only where kept)


def simulate(
    requests: Requests,
    *,
    cost: StepCost,
    policy: GammaPolicy,
    acceptance: AcceptanceSource | None,
    rng: np.random.Generator,
    scheduler: SchedulerConfig | None = None,
    record: bool = False,
) -> ServeRun:
    """Serve ``requests`` to completion; ``acceptance`` may be None only when ``policy`` never drafts."""
    sched = scheduler or SchedulerConfig()
    image_tokens = int(cost.image_tokens_per_image)
    st = _State(requests, image_tokens, policy.max_gamma, bool(getattr(cost, "keeps_rejected_drafts", False)))
    kv_free = float(sched.kv_cache_tokens) if sched.kv_cache_tokens is not None else float("inf")
    sched.check_workload(
        image_tokens=image_tokens if np.any(requests.images) else 0,
        max_gamma=policy.max_gamma,
        longest_prompt=int(st.prompt_total.max()),
        longest_sequence=int(st.kv_need.max()),
    )
    if policy.max_gamma > 0 and acceptance is None:
        raise SpecsimError("simulate: speculative decoding needs an acceptance source (alpha or traces)")
    draft_prefill = policy.max_gamma > 0
    arrival, n = requests.arrival_s, len(requests)
    run = np.empty(0, dtype=np.int64)
    t, next_admit, done, steps, busy = 0.0, 0, 0, 0, 0.0
    since = LONG_AFTER  # steps since the last step that admitted a request
    gaps: list[np.ndarray] = []
    zero_tokens = draft_tokens = accepted_tokens = sd_blocks = widest = decode_rows = decode_steps = 0
    log: list[StepRecord] | None = [] if record else None
    while done < n:
        arrived = int(np.searchsorted(arrival, t, side="right"))
        if run.size == 0 and next_admit == arrived:
            t = max(t, float(arrival[next_admit]))  # idle until the next arrival
            continue
        is_dec = st.computed[run] >= st.prompt_total[run]
        decoding = run[is_dec]
        gamma = policy.gamma_at(len(decoding))
        fast = not record and 0 < decoding.size == run.size
        horizon = _horizon(st, sched, run, next_admit, arrived, arrival, kv_free, gamma) if fast else None
        if horizon is not None:
            k, end, stats = _fast_forward(st, decoding, gamma, acceptance, rng, cost, t, horizon, gaps, since)
            widest = max(widest, stats[4])
            decode_rows, decode_steps = decode_rows + k * decoding.size, decode_steps + k
            since += k
            zero_tokens, draft_tokens = zero_tokens + stats[0], draft_tokens + stats[1]
            accepted_tokens, sd_blocks = accepted_tokens + stats[2], sd_blocks + stats[3]
            finished = decoding[st.generated[decoding] >= st.output[decoding]]
            if finished.size:
                st.finish_s[finished] = end
                kv_free += float(st.kv_need[finished].sum())
                done += finished.size
                run = run[np.isnan(st.finish_s[run])]
            busy += end - t
            t, steps = end, steps + k
            continue
        batch = schedule_step(
            sched,
            decoding=decoding,
            prefilling=run[~is_dec],
            waiting=range(next_admit, arrived),
            computed=st.computed,
            prompt_total=st.prompt_total,
            images=requests.images,
            image_tokens=image_tokens,
            gamma=gamma,
            kv_need=st.kv_need,
            kv_free_tokens=kv_free,
        )
        if batch.empty:
            raise SpecsimError(f"simulate: step {steps} at {t:.6g} s scheduled nothing (scheduler settings?)")
        dec = batch.decode
        ctx = st.prompt_total[dec] + st.generated[dec] - 1 + st.rejected[dec]  # 0 unless kept
        widest = max(widest, int(ctx.max(initial=0)))
        decode_rows, decode_steps = decode_rows + len(dec), decode_steps + bool(len(dec))
        since = 0 if batch.admitted else since
        ms = step_ms(
            cost,
            batch=len(dec),
            gamma=gamma,
            context_tokens=ctx,
            prefill_chunks=[(c[2], c[1], c[3]) for c in batch.chunks],
            images=sum(c[3] for c in batch.chunks),
            draft_prefill=draft_prefill,
            since_admission=since,
        )
        since += 1
        if not (np.isfinite(ms) and ms > 0):
            raise SpecsimError(f"step cost: expected a step time > 0 ms, got {ms!r} at step {steps}")
        end = t + ms / 1e3
        busy += ms / 1e3
        first = _finish_chunks(st, batch.chunks, end)
        acc, emit = _decode(st, dec, gamma, acceptance, rng, end, gaps)
        zero_tokens += int(emit.sum()) - len(dec)
        if gamma > 0:
            draft_tokens += gamma * len(dec)
            accepted_tokens += int(acc.sum())
            sd_blocks += len(dec)
        if batch.admitted:
            new = np.arange(next_admit, next_admit + batch.admitted)
            run = np.concatenate([run, new])
            kv_free -= float(st.kv_need[new].sum())
            next_admit += batch.admitted
        touched = np.concatenate([dec, first])
        finished = touched[st.generated[touched] >= st.output[touched]]
        if finished.size:
            st.finish_s[finished] = end
            kv_free += float(st.kv_need[finished].sum())
            done += finished.size
            run = run[np.isnan(st.finish_s[run])]
        if log is not None:
            log.append(
                StepRecord(
                    t,
                    end,
                    gamma,
                    tuple(map(int, dec)),
                    tuple(map(int, acc)),
                    tuple(map(int, emit)),
                    batch.chunks,
                )
            )
        t = end
        steps += 1
    return ServeRun(
        requests,
        st.first_s,
        st.finish_s,
        np.concatenate(gaps) if gaps else np.empty(0, dtype=np.float32),
        zero_tokens,
        steps,
        busy,
        draft_tokens,
        accepted_tokens,
        sd_blocks,
        tuple(log) if log is not None else None,
        widest,
        decode_rows / decode_steps if decode_steps else 0.0,
    )


def _horizon(st: _State, sched, run, next_admit, arrived, arrival, kv_free, gamma) -> float | None:
    """When the next request becomes admissible (s; inf: not before a request finishes), or None when one is
    admissible now or the decodes do not all fit the token budget (then a step goes through the scheduler)."""
    budget_left = sched.max_num_batched_tokens - run.size * (gamma + 1)
    if budget_left < 0:
        return None
    if budget_left == 0 or run.size >= sched.max_num_seqs:
        return float("inf")
    head = next_admit if next_admit < arrived else arrived
    if head >= len(arrival) or st.kv_need[head] > kv_free:
        return float("inf")  # FCFS: a head that does not fit blocks the queue until a request finishes
    return None if head < arrived else float(arrival[head])


def _fast_forward(st: _State, dec, gamma, acceptance, rng, cost, t, horizon, gaps, since: int):
    """Advance decode-only steps over ``dec`` until a request finishes or an admissible request arrives
    (``horizon``; the first step ``since`` steps after the last admission); returns (steps, end time,
    (zero-gap tokens, drafts, accepted, SD blocks, widest KV cache priced))."""
    gen0 = st.generated[dec]
    accs, emitted = _emissions(acceptance, dec, gen0, st.output[dec] - gen0, gamma, rng)
    before = np.cumsum(emitted, axis=0) - emitted  # tokens each step's own emission comes after
    if st.keeps_rejected:
        # masked columns: every draft a step rejects (none without drafts: accs are 0 at γ 0)
        rejected = gamma - accs
        before = before + st.rejected[dec] + np.cumsum(rejected, axis=0) - rejected
    ctx = st.prompt_total[dec] + gen0 - 1 + before
    ms = decode_steps_ms(
        cost, batch=dec.size, gamma=gamma, context_tokens=ctx, since_admission=since + np.arange(len(ctx))
    )
    if not (ms.min() > 0 and np.isfinite(ms.max())):
        raise SpecsimError(
            f"step cost: expected step times > 0 ms, got {ms[~(np.isfinite(ms) & (ms > 0))][0]!r}"
        )
    ends = np.cumsum(np.concatenate([[t], ms / 1e3]))[1:]  # sequential sums, as step by step
    k = min(len(ends), int(np.searchsorted(ends, horizon, side="left")) + 1)
    emitted = emitted[:k]
    gaps.append(((ends[0] - st.last_emit_s[dec]) * 1e3).astype(np.float32))
    if k > 1:
        gaps.append(np.repeat((np.diff(ends[:k]) * 1e3).astype(np.float32), dec.size))
    st.generated[dec] += emitted.sum(axis=0)
    if st.keeps_rejected:
        st.rejected[dec] += rejected[:k].sum(axis=0)
    st.last_emit_s[dec] = ends[k - 1]
    accepted = int(accs[:k].sum())
    blocks = k * dec.size if gamma > 0 else 0
    stats = (int(emitted.sum()) - k * dec.size, gamma * blocks, accepted, blocks, int(ctx[:k].max()))
    return k, float(ends[k - 1]), stats


def _emissions(acceptance, dec, gen, left, gamma, rng) -> tuple[np.ndarray, np.ndarray]:
    """([steps, requests] accepted drafts, tokens emitted) of the decode steps up to the first in which a
    request finishes (at most MAX_FAST_FORWARD_STEPS). A source whose draws do not depend on positions
    (``accepted_steps``, i.i.d.) is drawn for 2⌈min(left) / (γ + 1)⌉ steps at a time (no request can
    finish in fewer than half of them; draws past the finishing step are dropped); trace replay one step at a
    time."""
    block = getattr(acceptance, "accepted_steps", None) if gamma > 0 else None
    accs, emits, steps = [], [], 0
    while steps < MAX_FAST_FORWARD_STEPS:
        room = MAX_FAST_FORWARD_STEPS - steps
        if gamma == 0:
            acc = np.zeros((min(int(left.min()), room), dec.size), dtype=np.int64)
        elif block is not None:
            acc = block(dec.size, gamma, min(2 * -(-int(left.min()) // (gamma + 1)), room), rng)
        else:
            acc = np.asarray(acceptance.accepted(dec, gen, np.full(dec.size, gamma), rng))[None, :]
        made = acc + 1
        tokens = np.cumsum(made, axis=0)
        over = (tokens >= left).any(axis=1)
        finished = bool(over.any())
        last = int(over.argmax()) + 1 if finished else len(acc)
        acc, made, tokens = acc[:last], made[:last], tokens[:last]
        emit = np.minimum(made, left - tokens + made)  # capped at what each request has left
        accs.append(acc)
        emits.append(emit)
        steps += last
        if finished:
            break
        total = tokens[-1]
        gen, left = gen + total, left - total
    return np.concatenate(accs), np.concatenate(emits)


def _finish_chunks(st: _State, chunks, end_s: float) -> np.ndarray:
    """Advance the prefills; requests whose prompt is now cached emit their first token at ``end_s``."""
    first = []
    for r, start, n, _ in chunks:
        st.computed[r] = start + n
        if start + n == st.prompt_total[r]:
            first.append(r)
    ids = np.asarray(first, dtype=np.int64)
    if ids.size:
        st.generated[ids] = 1
        st.first_s[ids] = end_s
        st.last_emit_s[ids] = end_s
    return ids


def _decode(st: _State, dec, gamma, acceptance, rng, end_s, gaps) -> tuple[np.ndarray, np.ndarray]:
    """(accepted drafts, tokens emitted) of the decoding requests; records their ITL gaps (ms)."""
    if dec.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    made = st.generated[dec]
    if gamma > 0:
        acc = np.asarray(acceptance.accepted(dec, made, np.full(dec.size, gamma), rng), dtype=np.int64)
        if st.keeps_rejected:
            st.rejected[dec] += gamma - acc
    else:
        acc = np.zeros(dec.size, dtype=np.int64)
    emit = np.minimum(acc + 1, st.output[dec] - made)
    gaps.append(((end_s - st.last_emit_s[dec]) * 1e3).astype(np.float32))
    st.generated[dec] = made + emit
    st.last_emit_s[dec] = end_s
    return acc, emit
