"""Standard Workload Format (SWF) loader and writer (:func:`format_swf`).

Reads plain or gzip-compressed SWF files into column arrays (:class:`SwfTrace`), applying the
cleaning rules of RLScheduler's ``job.py`` (reproduction spec A.1):

* ``processors = max(allocated [5], requested [8])``;
* ``request_time [9] == -1`` is replaced by the run time (the Lublin traces have perfect estimates);
* ``max_exec_time`` is the maximum run time over *all* job lines, before filtering;
* a run time < 0 becomes 10 s, then only jobs with run time > 0 are kept;
* the machine size comes from the ``; MaxNodes:`` / ``; MaxProcs:`` header lines
  (``MaxProcs`` defaults to ``MaxNodes``, and vice versa).

One deliberate addition: jobs asking for fewer than one processor (both fields -1) are dropped
and counted in :attr:`SwfTrace.dropped_no_procs` (RLScheduler would "allocate" -1 nodes).

Jobs are ordered by submit time, ties by job id (``order="submit"``, the default) or by job id
alone (``order="id"``, what RLScheduler does).  The two orders coincide for the Lublin traces.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

SWF_FIELDS = 18
_HEADER = re.compile(r"^;\s*(MaxNodes|MaxProcs)\s*:\s*(\S+)")

TraceOrder = Literal["submit", "id"]


class SwfFormatError(ValueError):
    """A malformed SWF file; the message names the file and the 1-based line number."""

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        super().__init__(f"{path}:{line_no}: {reason}")
        self.path = path
        self.line_no = line_no
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SwfTrace:
    """A cleaned SWF trace as column arrays (one entry per kept job, in trace order)."""

    name: str
    job_id: IntArray
    submit_time: IntArray
    run_time: IntArray
    #: ``max(allocated, requested)`` processors
    processors: IntArray
    #: user estimate in seconds (the run time when the trace has none)
    request_time: IntArray
    request_memory: IntArray
    user_id: IntArray
    group_id: IntArray
    executable: IntArray
    max_nodes: int
    max_procs: int
    #: maximum run time over all job lines before filtering (feature normalisation)
    max_exec_time: int
    dropped_no_procs: int = 0

    @property
    def n_jobs(self) -> int:
        return int(self.job_id.shape[0])

    @property
    def procs_per_node(self) -> float:
        return self.max_procs / self.max_nodes

    def nodes_needed(self) -> IntArray:
        """Whole nodes per job: ``ceil(processors / procs_per_node)`` (spec A.2)."""
        ppn = self.procs_per_node
        return np.array([math.ceil(p / ppn) for p in self.processors.tolist()], dtype=np.int64)


def _open_text(path: Path) -> io.TextIOBase:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8", errors="replace")


def _parse_int(token: str) -> int:
    try:
        return int(token)
    except ValueError:
        value = float(token)  # SWF allows floating point values; RLScheduler truncates
        if not np.isfinite(value):
            raise
        return int(value)


def _rows(path: str, lines: Iterable[str]) -> Iterator[tuple[int, list[int]]]:
    for line_no, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        tokens = line.split()
        if len(tokens) < SWF_FIELDS:
            raise SwfFormatError(
                path, line_no, f"expected {SWF_FIELDS} fields, found {len(tokens)}"
            )
        try:
            values = [_parse_int(t) for t in tokens[:SWF_FIELDS]]
        except ValueError as exc:
            raise SwfFormatError(path, line_no, f"non-numeric field: {exc}") from None
        yield line_no, values


def _header_value(path: str, line_no: int, key: str, raw: str) -> int:
    try:
        value = int(float(raw))
    except ValueError:
        raise SwfFormatError(path, line_no, f"bad {key} header value {raw!r}") from None
    if value <= 0:
        raise SwfFormatError(path, line_no, f"{key} must be positive, got {value}")
    return value


class _Header:
    """Collects ``MaxNodes`` / ``MaxProcs`` while passing every line through."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.max_nodes = 0
        self.max_procs = 0

    def scan(self, lines: Iterable[str]) -> Iterator[str]:
        for line_no, raw in enumerate(lines, start=1):
            if raw.startswith(";"):
                match = _HEADER.match(raw)
                if match:
                    value = _header_value(self.name, line_no, match.group(1), match.group(2))
                    if match.group(1) == "MaxNodes":
                        self.max_nodes = value
                    else:
                        self.max_procs = value
            yield raw

    def machine(self) -> tuple[int, int]:
        if self.max_nodes == 0 and self.max_procs == 0:
            raise SwfFormatError(self.name, 0, "no '; MaxNodes:' or '; MaxProcs:' header line")
        return (self.max_nodes or self.max_procs, self.max_procs or self.max_nodes)


def parse_swf(
    lines: Iterable[str], *, name: str = "<swf>", order: TraceOrder = "submit"
) -> SwfTrace:
    """Parse SWF text lines (see the module docstring for the cleaning rules)."""
    header = _Header(name)
    max_exec_time = 0
    kept: list[list[int]] = []
    dropped_no_procs = 0

    for _line_no, v in _rows(name, header.scan(lines)):
        run_time = v[3]
        max_exec_time = max(max_exec_time, run_time)
        procs = max(v[4], v[7])
        request_time = run_time if v[8] == -1 else v[8]
        if run_time < 0:
            run_time = 10
        if run_time <= 0:
            continue
        if procs < 1:
            dropped_no_procs += 1
            continue
        # job_id, submit, run, procs, request, memory, user, group, executable
        kept.append([v[0], v[1], run_time, procs, request_time, v[9], v[11], v[12], v[13]])

    max_nodes, max_procs = header.machine()
    table = np.array(kept, dtype=np.int64).reshape(-1, 9)
    if order == "submit":
        perm = np.lexsort((table[:, 0], table[:, 1]))
    else:
        perm = np.argsort(table[:, 0], kind="stable")
    table = table[perm]
    cols = [np.ascontiguousarray(table[:, k]) for k in range(9)]
    return SwfTrace(
        name=name,
        job_id=cols[0],
        submit_time=cols[1],
        run_time=cols[2],
        processors=cols[3],
        request_time=cols[4],
        request_memory=cols[5],
        user_id=cols[6],
        group_id=cols[7],
        executable=cols[8],
        max_nodes=max_nodes,
        max_procs=max_procs,
        max_exec_time=max_exec_time,
        dropped_no_procs=dropped_no_procs,
    )


def load_swf(path: str | Path, *, order: TraceOrder = "submit") -> SwfTrace:
    """Load a plain or gzip-compressed SWF file."""
    p = Path(path)
    name = p.name
    for suffix in (".gz", ".swf"):
        name = name.removesuffix(suffix)
    with _open_text(p) as fh:
        trace = parse_swf(fh, name=str(p), order=order)
    return dataclasses.replace(trace, name=name)


def _swf_token(value: float) -> str:
    if type(value) is int:
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"an SWF field must be finite, got {value!r}")
    return str(int(number)) if number == int(number) else repr(number)


def format_swf(
    rows: Iterable[Sequence[float]],
    *,
    max_nodes: int,
    max_procs: int,
    comments: Iterable[str] = (),
) -> Iterator[str]:
    """SWF text lines (each ending in ``\\n``) that :func:`parse_swf` reads back: the
    ``comments`` as ``; `` header lines, the ``MaxNodes``/``MaxProcs`` headers, then one line of
    exactly :data:`SWF_FIELDS` fields per row (``-1``: unknown). Integral values are written
    without a decimal point."""
    if max_nodes < 1 or max_procs < 1:
        raise ValueError(f"MaxNodes and MaxProcs must be positive ({max_nodes}, {max_procs})")
    for comment in comments:
        for part in comment.splitlines() or [""]:
            yield f"; {part}".rstrip() + "\n"
    yield f"; MaxNodes: {max_nodes}\n"
    yield f"; MaxProcs: {max_procs}\n"
    for row in rows:
        if len(row) != SWF_FIELDS:
            raise ValueError(f"an SWF row has {SWF_FIELDS} fields, got {len(row)}")
        yield " ".join(_swf_token(v) for v in row) + "\n"
