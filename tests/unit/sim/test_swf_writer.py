"""``format_swf`` writes what ``parse_swf`` reads back, field for field."""

from __future__ import annotations

import pytest

from app.domains.hpc.swf import SWF_FIELDS, format_swf, parse_swf


def _row(job: int, submit: float, wait: float, run: float, procs: int, req: float) -> list[float]:
    row = [-1.0] * SWF_FIELDS
    row[0], row[1], row[2], row[3], row[4] = job, submit, wait, run, procs
    row[7], row[8], row[10], row[11] = procs, req, 1, job % 3
    return row


def test_round_trip_keeps_every_job_and_the_machine() -> None:
    rows = [_row(1, 0, 5, 10, 2, 20), _row(2, 3, 0, 7.5, 1, 9), _row(3, 3, 1, 1, 4, 2)]
    lines = list(format_swf(rows, max_nodes=2, max_procs=8, comments=["Computer: c1", "a\nb"]))
    assert lines[:3] == ["; Computer: c1\n", "; a\n", "; b\n"]
    assert all(line.endswith("\n") for line in lines)
    trace = parse_swf(lines)
    assert (trace.max_nodes, trace.max_procs) == (2, 8)
    assert trace.job_id.tolist() == [1, 2, 3]
    assert trace.submit_time.tolist() == [0, 3, 3]
    assert trace.run_time.tolist() == [10, 7, 1]  # the reader truncates fractional seconds
    assert trace.processors.tolist() == [2, 1, 4]
    assert trace.request_time.tolist() == [20, 9, 2]
    assert trace.user_id.tolist() == [1, 2, 0]
    assert lines[-2] == "2 3 0 7.5 1 -1 -1 1 9 -1 1 2 -1 -1 -1 -1 -1 -1\n"


@pytest.mark.parametrize(
    ("rows", "nodes", "message"),
    [
        ([[1.0] * 17], 1, "18 fields"),
        ([[float("nan")] * SWF_FIELDS], 1, "finite"),
        ([], 0, "positive"),
    ],
)
def test_bad_input_is_refused(rows: list[list[float]], nodes: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        list(format_swf(rows, max_nodes=nodes, max_procs=1))
