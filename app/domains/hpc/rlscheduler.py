"""``rlscheduler`` semantics: RLScheduler's (SC'20) simulator, quirks included.

This reproduces RLScheduler's simulator (sections A.2-A.7 of the project's HPC reproduction
spec) exactly enough to match every
published heuristic cell for Lublin-1/Lublin-2 (see ``tests/unit/sim/test_rlscheduler_golden.py``):

* node-granular allocation: a job takes ``ceil(procs / procs_per_node)`` whole nodes;
* one decision at a time; time advances one event at a time (an arrival wins a tie with a
  completion: ``submit <= release``); after a start the next decision is taken at the same time;
  when the queue is empty the simulator advances until exactly one job has arrived;
* without backfilling the chosen job blocks the queue until it fits (head-of-line blocking);
* with backfilling the chosen job's shadow time is computed once (running jobs by
  ``start + request_time``) and, until it fits, every queued job that fits now and satisfies
  ``now + request_time < shadow`` (strict) is started, scanning in FCFS order;
* the episode ends when the last job of the sequence has *started*; the cluster starts empty.

RLScheduler keeps the queue as a Python list that it re-sorts in place (stable sort) with the
policy key at each decision and with the FCFS key before each backfill scan.  All rlscheduler
policy keys are static per job (WFP3/UNICEP use ``w = -1 - s``), so the live-list order is
reproduced with precomputed ranks instead of sorting (ADR 0030):

* the policy pick is the minimum of ``(key, index)``;
* the backfill scan order is ``(submit, key, index)`` for jobs queued at the decision, followed
  by the jobs that arrive during the reservation in arrival order.

This is exact when the trace is ordered by submit time (ties by id), which is how
:func:`app.domains.hpc.swf.load_swf` orders it by default (and for Lublin the id order is the same).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from app.domains.hpc.ranking import ScoringRanker, rls_picker
from app.domains.hpc.swf import SwfTrace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_INF = float("inf")
#: ``pick(queued jobs in arrival order, now, free nodes) -> job`` (a learned policy)
Picker = Callable[[list[int], float, int], int]


class RlsPolicy(StrEnum):
    FCFS = "fcfs"
    SJF = "sjf"
    WFP3 = "wfp3"
    UNICEP = "unicep"
    F1 = "f1"
    F2 = "f2"
    F3 = "f3"
    F4 = "f4"
    SMALLEST = "smallest"


def policy_keys(
    policy: RlsPolicy | str, submit: IntArray, request: IntArray, procs: IntArray
) -> list[FloatArray]:
    """The sort keys of RLScheduler's score functions, most significant first (lower = first).

    WFP3 and UNICEP use the code's ``w = scheduled_time - submit = -1 - submit`` (A.7).
    """
    s = submit.astype(np.float64)
    r = request.astype(np.float64)
    n = procs.astype(np.float64)
    name = RlsPolicy(policy)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if name is RlsPolicy.FCFS:
            return [s]
        if name is RlsPolicy.SJF:
            return [r, s]
        if name is RlsPolicy.SMALLEST:
            return [n, s]
        if name is RlsPolicy.WFP3:
            w = -1.0 - s
            return [-np.power(w / r, 3) * n]
        if name is RlsPolicy.UNICEP:
            w = -1.0 - s
            return [-(w + 1e-15) / (np.log2(n + 1e-15) * r)]
        if name is RlsPolicy.F1:
            rr = np.where(r > 0, r, 0.1)
            ss = np.where(s > 0, s, 0.1)
            return [np.log10(rr) * n + 870.0 * np.log10(ss)]
        if name is RlsPolicy.F2:
            return [np.sqrt(r) * n + 25600.0 * np.log10(s)]
        if name is RlsPolicy.F3:
            return [r * n + 6860000.0 * np.log10(s)]
        return [r * np.sqrt(n) + 530000.0 * np.log10(s)]


def _ranks(keys: Sequence[FloatArray], n: int) -> IntArray:
    """``rank[i]`` = position of job ``i`` in the order (keys..., index)."""
    order = np.lexsort((np.arange(n), *reversed(list(keys))))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


@dataclass(frozen=True, slots=True)
class SequenceResult:
    """One simulated job sequence: per-job arrays in trace order, plus the episode clock."""

    submit: FloatArray
    run: FloatArray
    procs: IntArray
    start: FloatArray
    #: simulated time when the episode ended (rlscheduler: the last start)
    end_time: float
    max_procs: int
    user: IntArray | None = None


@dataclass(frozen=True, slots=True)
class PreparedSequence:
    """Python lists for the hot loop (list indexing is faster than numpy scalar access)."""

    submit: list[int]
    run: list[int]
    request: list[int]
    procs: list[int]
    nodes: list[int]
    total_nodes: int
    procs_per_node: float
    #: every request_time equals the run time (then RLScheduler's two running-list sorts agree)
    exact_estimates: bool = False


def prepare(trace: SwfTrace, start: int, length: int) -> PreparedSequence:
    stop = start + length
    if start < 0 or length <= 0 or stop > trace.n_jobs:
        raise ValueError(f"sequence [{start}, {stop}) is outside the trace's {trace.n_jobs} jobs")
    ppn = trace.procs_per_node
    procs = trace.processors[start:stop].tolist()
    nodes = list(procs) if ppn == 1.0 else [math.ceil(p / ppn) for p in procs]
    if nodes and max(nodes) > trace.max_nodes:
        i = next(i for i, k in enumerate(nodes) if k > trace.max_nodes)
        raise ValueError(
            f"job {int(trace.job_id[start + i])} needs {nodes[i]} nodes; "
            f"the machine has {trace.max_nodes}"
        )
    run = trace.run_time[start:stop]
    request = trace.request_time[start:stop]
    return PreparedSequence(
        submit=trace.submit_time[start:stop].tolist(),
        run=run.tolist(),
        request=request.tolist(),
        procs=procs,
        nodes=nodes,
        total_nodes=trace.max_nodes,
        procs_per_node=ppn,
        exact_estimates=bool(np.array_equal(run, request)),
    )


def simulate_sequence(
    trace: SwfTrace,
    start: int,
    length: int,
    policy: RlsPolicy | str | ScoringRanker,
    *,
    backfill: bool,
) -> SequenceResult:
    """Run one heuristic (or a ranking policy, e.g. an ONNX model: it picks each job, A.8's
    "RL" slot) on jobs ``[start, start + length)`` from an empty cluster."""
    seq = prepare(trace, start, length)
    stop = start + length
    if not isinstance(policy, str):
        picker = rls_picker(
            policy, seq.submit, seq.request, seq.nodes, seq.total_nodes, seq.procs_per_node
        )
        # no policy key sorts the queue: ties and backfill scans keep arrival order
        starts, end_time = run_heuristic(
            seq, list(range(length)), [], backfill=backfill, picker=picker
        )
        return _result(trace, start, stop, starts, end_time)
    keys = policy_keys(
        policy,
        trace.submit_time[start:stop],
        trace.request_time[start:stop],
        trace.processors[start:stop],
    )
    prio = _ranks(keys, length)
    submit = trace.submit_time[start:stop]
    if not backfill or bool(np.all(submit[1:] > submit[:-1])):
        fcfs: list[int] = []  # unused, or distinct submit times: FCFS rank = index
    else:
        order = np.lexsort((prio, submit))  # (submit, prio); prio ranks are distinct
        ranks = np.empty(length, dtype=np.int64)
        ranks[order] = np.arange(length)
        fcfs = ranks.tolist()
    starts, end_time = run_heuristic(seq, prio.tolist(), fcfs, backfill=backfill)
    return _result(trace, start, stop, starts, end_time)


def _result(
    trace: SwfTrace, start: int, stop: int, starts: list[float], end_time: float
) -> SequenceResult:
    return SequenceResult(
        submit=trace.submit_time[start:stop].astype(np.float64),
        run=trace.run_time[start:stop].astype(np.float64),
        procs=trace.processors[start:stop],
        start=np.asarray(starts, dtype=np.float64),
        end_time=float(end_time),
        max_procs=trace.max_procs,
        user=trace.user_id[start:stop],
    )


def _reserve(
    running: list[tuple[float, int, int]],
    est: list[float],
    nodes: list[int],
    free: int,
    ppn: float,
    procs_needed: int,
    now: float,
    counter: int,
) -> tuple[float, list[tuple[float, int, int]], int]:
    """RLScheduler's shadow time, and the effect of its in-place sort of the running list.

    ``est[k]`` is job ``k``'s requested end ``start + request_time`` (set when it starts).
    Shadow: running jobs by requested end, nodes accumulated until the job fits (the order among
    equal requested ends cannot change the shadow, so it is left to the sort).
    RLScheduler sorts its running list in place by that key (stable); the list order
    only matters between jobs that end at the same time (it decides which one a completion event
    releases first), and among those the list position is the rank order.  So jobs sharing an
    end get new ranks (from ``counter`` on) in ``(requested end, rank)`` order; others keep theirs.
    Returns ``(shadow, running heap, counter)``.
    """
    free_procs = free * ppn
    shadow = now
    ks = [e[2] for e in running]
    ks.sort(key=est.__getitem__)
    for k in ks:
        free_procs += nodes[k] * ppn
        shadow = est[k]
        if free_procs >= procs_needed:
            break
    if len({e[0] for e in running}) == len(running):
        return shadow, running, counter  # no two jobs end together: order is irrelevant
    by_end = sorted(running)
    i, m = 0, len(by_end)
    while i < m:
        end = by_end[i][0]
        stop = i + 1
        while stop < m and by_end[stop][0] == end:
            stop += 1
        if stop - i > 1:
            group = sorted(by_end[i:stop], key=lambda e: (est[e[2]], e[1]))
            for p, e in enumerate(group):
                by_end[i + p] = (e[0], counter + p, e[2])
            counter += stop - i
        i = stop
    return shadow, by_end, counter  # a sorted list is a valid heap


def run_heuristic(  # noqa: C901 - one hot loop, kept flat for speed
    seq: PreparedSequence,
    prio: list[int],
    fcfs: list[int],
    *,
    backfill: bool,
    picker: Picker | None = None,
) -> tuple[list[float], float]:
    """The event loop.  ``prio`` / ``fcfs`` are per-job ranks (see the module docstring); an
    empty ``fcfs`` means the FCFS order is the index order (distinct submit times).

    With ``picker`` (a learned policy, :func:`app.domains.hpc.ranking.rls_picker`), each decision is
    ``picker(queued jobs in arrival order, now, free nodes)`` instead of the best ``prio`` rank;
    everything else (blocking, backfilling, the clock) is unchanged.

    Returns the start time of every job and the time of the last start.
    """
    submit = seq.submit
    run = seq.run
    request = seq.request
    nodes = seq.nodes
    procs = seq.procs
    ppn = seq.procs_per_node
    exact = seq.exact_estimates
    n_nodes_max = seq.total_nodes + 1
    n = len(submit)
    heappush = heapq.heappush
    heappop = heapq.heappop

    by_prio = [0] * n
    for j, p in enumerate(prio):
        by_prio[p] = j

    start: list[float] = [-1] * n
    est: list[float] = [0.0] * n if backfill else []  # requested ends (start + request)
    queue: list[int] = [prio[0]]  # heap of priority ranks, lazily purged of started jobs
    nwait = 1  # queued jobs
    # backfilling or a picker only: the queued jobs, in arrival (= index) order
    track = backfill or picker is not None
    waiting: dict[int, None] = {0: None} if track else {}
    sort_cands = bool(fcfs)  # else FCFS order = index order = arrival order
    running: list[tuple[float, int, int]] = []  # heap of (end, start sequence, job)
    free = seq.total_nodes
    # times stay Python ints (the trace's integer seconds): int-int comparisons are the fastest
    now: float = submit[0]
    nxt = 1
    counter = 0  # rank of the next started job (see _reserve)

    while True:
        # ---- decision: the policy's choice among the queued jobs
        if picker is None:
            while True:
                j = by_prio[queue[0]]
                if start[j] < 0:
                    break
                heappop(queue)
        else:
            j = picker(list(waiting), now, free)
        need = nodes[j]

        if need > free:
            if not backfill:
                # head-of-line blocking: advance one event at a time until j fits
                while need > free:
                    rel = running[0][0]
                    while nxt < n and submit[nxt] <= rel:
                        if submit[nxt] > now:
                            now = submit[nxt]
                        heappush(queue, prio[nxt])
                        if track:
                            waiting[nxt] = None
                        nwait += 1
                        nxt += 1
                    if rel > now:
                        now = rel
                    free += nodes[heappop(running)[2]]
            else:
                if exact:
                    # both running-list sorts agree: the heap order is the list order
                    free_procs = free * ppn
                    need_procs = procs[j]
                    shadow = now
                    for e in sorted(running):
                        free_procs += nodes[e[2]] * ppn
                        shadow = e[0]
                        if free_procs >= need_procs:
                            break
                else:
                    shadow, running, counter = _reserve(
                        running, est, nodes, free, ppn, procs[j], now, counter
                    )
                lim = shadow - now
                cands = [k for k in waiting if request[k] < lim]
                if sort_cands and len(cands) > 1:
                    cands.sort(key=fcfs.__getitem__)
                scan = True
                cmin = 0  # fewest nodes any candidate needs (a scan is useless below it)
                while need > free:
                    if scan and cands and free >= cmin:
                        lim = shadow - now
                        keep: list[int] = []
                        cmin = n_nodes_max
                        for k in cands:
                            if request[k] >= lim:
                                continue  # can never backfill in this reservation again
                            nk = nodes[k]
                            if nk <= free:
                                start[k] = now
                                free -= nk
                                heappush(running, (now + run[k], counter, k))
                                est[k] = now + request[k]
                                counter += 1
                                nwait -= 1
                                del waiting[k]
                            else:
                                keep.append(k)
                                if nk < cmin:
                                    cmin = nk
                        cands = keep
                    scan = False
                    # advance one event
                    rel = running[0][0]
                    if nxt < n and submit[nxt] <= rel:
                        k = nxt
                        nxt += 1
                        if submit[k] > now:
                            now = submit[k]
                        heappush(queue, prio[k])
                        nwait += 1
                        # only the new arrival can newly qualify (free and now unchanged/later)
                        if now + request[k] < shadow and nodes[k] <= free:
                            start[k] = now
                            free -= nodes[k]
                            heappush(running, (now + run[k], counter, k))
                            est[k] = now + request[k]
                            counter += 1
                            nwait -= 1
                        else:
                            waiting[k] = None
                            if now + request[k] < shadow:
                                cands.append(k)
                                if nodes[k] < cmin:
                                    cmin = nodes[k]
                    else:
                        if rel > now:
                            now = rel
                        free += nodes[heappop(running)[2]]
                        scan = True

        # ---- start the chosen job
        start[j] = now
        free -= need
        heappush(running, (now + run[j], counter, j))
        counter += 1
        nwait -= 1
        if track:
            del waiting[j]
        if backfill:
            est[j] = now + request[j]

        if not nwait:
            if nxt >= n:
                return start, now
            # advance until exactly one job has arrived
            while True:
                rel = running[0][0] if running else _INF
                if submit[nxt] <= rel:
                    if submit[nxt] > now:
                        now = submit[nxt]
                    heappush(queue, prio[nxt])
                    nwait += 1
                    if track:
                        waiting[nxt] = None
                    nxt += 1
                    break
                if rel > now:
                    now = rel
                free += nodes[heappop(running)[2]]


# ---------------------------------------------------------------- sequence sampling (A.3)


def legacy_gym_rng(seed: int) -> np.random.RandomState:
    """gym's legacy ``seeding.np_random(seed)``: SHA-512 of the decimal seed -> uint32 words."""
    if seed < 0:
        raise ValueError("seed must be a non-negative integer")
    seed = seed % 2**64
    digest = hashlib.sha512(str(seed).encode("utf8")).digest()[:8]
    padded = digest + b"\0" * 4  # gym pads even a multiple of 4 with a full word
    big = 0
    for i, word in enumerate(struct.unpack("<3I", padded)):
        big += word << (32 * i)
    words: list[int] = []
    while big > 0:
        big, mod = divmod(big, 2**32)
        words.append(mod)
    return np.random.RandomState(words or [0])


def sample_starts(
    n_jobs: int, length: int, count: int, seed: int, *, batch_slice: int = 0
) -> list[int]:
    """Start indices of ``count`` sequences: ``randint(length, upper - length - 1)`` each."""
    upper = n_jobs if batch_slice == 0 else batch_slice
    if batch_slice and batch_slice < length:
        raise ValueError("batch_slice must be 0 or at least the sequence length")
    high = upper - length - 1
    if high <= length:
        raise ValueError(
            f"trace too short: {upper} jobs cannot hold sequences of {length} "
            f"(need more than {2 * length + 1})"
        )
    rng = legacy_gym_rng(seed)
    return [int(rng.randint(length, high)) for _ in range(count)]
