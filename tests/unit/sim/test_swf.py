from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from app.domains.hpc.swf import SwfFormatError, load_swf, parse_swf

DATA = Path(__file__).resolve().parents[3] / "data"

HEADER = "; Version: 2\n; MaxNodes: 8\n; MaxProcs: 16\n"


def _line(job, submit, run, alloc, req_procs=-1, req_time=-1, user=-1):
    fields = [
        job,
        submit,
        -1,
        run,
        alloc,
        -1,
        -1,
        req_procs,
        req_time,
        -1,
        1,
        user,
        -1,
        -1,
        0,
        -1,
        -1,
        -1,
    ]
    return " ".join(str(f) for f in fields) + "\n"


def test_cleaning_rules():
    text = HEADER + "".join(
        [
            _line(1, 10, 100, 4, req_procs=6),  # procs = max(alloc, req) = 6
            _line(2, 20, 0, 1),  # run 0: dropped
            _line(3, 30, -5, 1),  # run < 0 -> 10 s
            _line(4, 40, 500, 1, req_time=900),  # explicit estimate kept
            _line(5, 50, 9999, -1),  # no processors: dropped
        ]
    )
    tr = parse_swf(text.splitlines(keepends=True))
    assert tr.job_id.tolist() == [1, 3, 4]
    assert tr.processors.tolist() == [6, 1, 1]
    assert tr.run_time.tolist() == [100, 10, 500]
    assert tr.request_time.tolist() == [100, -5, 900]  # -1 replaced by the raw run time
    assert tr.max_exec_time == 9999  # over all lines, before filtering
    assert (tr.max_nodes, tr.max_procs, tr.procs_per_node) == (8, 16, 2.0)
    assert tr.dropped_no_procs == 1
    assert tr.nodes_needed().tolist() == [3, 1, 1]  # ceil(procs / 2)


def test_max_procs_defaults_to_max_nodes():
    tr = parse_swf(["; MaxNodes: 4\n", _line(1, 0, 5, 3)])
    assert (tr.max_nodes, tr.max_procs) == (4, 4)


def test_submit_order_with_id_ties_and_id_order():
    lines = [
        *HEADER.splitlines(keepends=True),
        _line(7, 50, 5, 1),
        _line(3, 50, 5, 1),
        _line(2, 60, 5, 1),
        _line(9, 10, 5, 1),
    ]
    assert parse_swf(lines).job_id.tolist() == [9, 3, 7, 2]
    assert parse_swf(lines, order="id").job_id.tolist() == [2, 3, 7, 9]


def test_malformed_line_names_the_line():
    text = [HEADER, _line(1, 0, 5, 1), "2 10 -1 5 1\n"]
    with pytest.raises(SwfFormatError, match=r"<swf>:5: expected 18 fields, found 5"):
        parse_swf("".join(text).splitlines(keepends=True))
    bad = _line(1, 0, 5, 1).replace(" 5 ", " five ", 1)
    with pytest.raises(SwfFormatError, match=r":4: non-numeric field"):
        parse_swf((HEADER + bad).splitlines(keepends=True))


def test_missing_machine_size_is_an_error():
    with pytest.raises(SwfFormatError, match="MaxNodes"):
        parse_swf([_line(1, 0, 5, 1)])


def test_plain_and_gzip_give_the_same_trace(tmp_path):
    text = HEADER + _line(1, 0, 5, 2) + _line(2, 3, 7, 16)
    plain = tmp_path / "t.swf"
    plain.write_text(text)
    packed = tmp_path / "t.swf.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = load_swf(plain), load_swf(packed)
    assert a.name == b.name == "t"
    assert a.processors.tolist() == b.processors.tolist() == [2, 16]


def test_lublin_traces_id_order_equals_submit_order():
    for name in ("lublin_256.swf.gz", "lublin_256_new2.swf.gz"):
        by_submit = load_swf(DATA / name)
        by_id = load_swf(DATA / name, order="id")
        assert by_submit.job_id.tolist() == by_id.job_id.tolist()
        assert by_submit.n_jobs == 10_000
        assert (by_submit.max_nodes, by_submit.max_procs) == (256, 256)


def test_max_nodes_defaults_to_max_procs():
    tr = parse_swf(["; MaxProcs: 6\n", _line(1, 0, 5, 3)])
    assert (tr.max_nodes, tr.max_procs, tr.procs_per_node) == (6, 6, 1.0)


def test_bad_header_value_names_the_line():
    with pytest.raises(SwfFormatError, match=r"<swf>:2: bad MaxProcs header value 'lots'"):
        parse_swf(["; MaxNodes: 4\n", "; MaxProcs: lots\n", _line(1, 0, 5, 1)])
    with pytest.raises(SwfFormatError, match=r"<swf>:1: MaxNodes must be positive, got 0"):
        parse_swf(["; MaxNodes: 0\n", _line(1, 0, 5, 1)])


def test_malformed_gzip_trace_names_the_file_and_line(tmp_path):
    packed = tmp_path / "broken.swf.gz"
    packed.write_bytes(gzip.compress((HEADER + _line(1, 0, 5, 1) + "2 10 -1\n").encode()))
    with pytest.raises(SwfFormatError, match=r"broken\.swf\.gz:5: expected 18 fields, found 3"):
        load_swf(packed)
