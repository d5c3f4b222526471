"""Workloads from the Philly table: the week split (training weeks 0-9, validation 10-11, the
test weeks 12-15 never mixed in), the Pollux generator's semantics and rigid jobs of its rows."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.domains.gpu.philly import (
    TEST_WEEKS,
    TRAIN_WEEKS,
    TUNED_CONFIGS,
    VALIDATION_WEEKS,
    PhillyJob,
    generate_pollux_workload,
    parse_philly,
    rigid_jobs,
    split_weeks,
)
from sim.gpu_data import PHILLY_CSV, load_applications, load_philly

ORIGIN = datetime(2017, 9, 4, 10, 30, 41)  # noqa: DTZ001 - the table's naive local time


def _job(i: int, at: datetime, duration: float = 600.0, gpus: int = 1) -> PhillyJob:
    return PhillyJob(i, at, duration, gpus, "vc")


@pytest.mark.slow
def test_the_shipped_table_is_the_spec_one_and_its_weeks() -> None:
    jobs = load_philly(PHILLY_CSV)
    assert len(jobs) == 82_247
    assert min(j.timestamp for j in jobs) == ORIGIN
    weeks = split_weeks(jobs, *[[w] for w in range(16)])
    # spec section 1.1's weekly arrivals
    assert [len(w) for w in weeks] == [
        9, 13, 1549, 5462, 11437, 11967, 14724, 6948, 3829, 7685, 4527, 3578, 3781, 4706, 658,
        1374,
    ]  # fmt: skip


def test_split_is_disjoint_and_never_leaks_test_weeks() -> None:
    at = [ORIGIN] + [ORIGIN + timedelta(days=d, hours=-6) for d in range(1, 16 * 7, 3)]
    jobs = [_job(i, t) for i, t in enumerate(at)]
    train, val, test = split_weeks(jobs, TRAIN_WEEKS, VALIDATION_WEEKS, TEST_WEEKS)
    assert {j.index for j in train} | {j.index for j in val} | {j.index for j in test} == {
        j.index for j in jobs
    }
    assert all((j.timestamp - ORIGIN).days < 70 for j in train)
    assert all(70 <= (j.timestamp - ORIGIN).days < 84 for j in val)
    assert all((j.timestamp - ORIGIN).days >= 84 for j in test)
    with pytest.raises(ValueError, match="overlap"):
        split_weeks(jobs, TRAIN_WEEKS, [9, 10])
    # a workload from the training weeks holds only their jobs: every one but the first (10:30,
    # outside the 02:00-10:00 window) is eligible, so a workload of all of them takes them all
    wl = generate_pollux_workload(train, seed=1, n=len(train) - 1)
    assert sorted(j.arrival for j in wl) == sorted(
        float((t - timedelta(hours=2)).hour * 3600 + t.minute * 60 + t.second)
        for t in (j.timestamp for j in train[1:])
    )
    with pytest.raises(ValueError, match="eligible"):
        generate_pollux_workload(train, seed=1, n=len(train))


def test_the_generator_filters_shifts_and_maps_applications() -> None:
    day = datetime(2017, 10, 2)  # noqa: DTZ001
    jobs = [
        _job(0, day + timedelta(hours=2, minutes=5), 600.0),  # 02:05 -> shifted 00:05: kept
        _job(1, day + timedelta(hours=9, minutes=59), 3 * 3600.0),  # 09:59 -> 07:59: kept
        _job(2, day + timedelta(hours=10), 600.0),  # 10:00 -> 08:00: outside the window
        _job(3, day + timedelta(hours=3), 30.0),  # shorter than 60 s
        _job(4, day + timedelta(hours=3), 3600.0 * 200, 8),  # 1600 GPU-h >= 1000
        _job(5, day + timedelta(hours=4), 3600.0 * 20, 2),  # 40 GPU-h: yolov3
        _job(6, day + timedelta(hours=5), 3600.0 * 150, 1),  # 150 GPU-h: imagenet
    ]
    wl = generate_pollux_workload(jobs, seed=3, n=4)
    assert [j.arrival for j in wl] == [5 * 60.0, 2 * 3600.0, 3 * 3600.0, 7 * 3600 + 59 * 60.0]
    apps = [j.app for j in wl]
    assert apps[0] in {"cifar10", "ncf"}
    assert apps[1:3] == ["yolov3", "imagenet"]
    assert apps[3] in {"deepspeech2", "bert"}
    assert [j.id for j in wl] == [f"{a}-{k}" for k, a in enumerate(apps)]
    for j in wl:
        replicas, batches = TUNED_CONFIGS[str(j.app)]
        assert j.min_gpus == j.max_gpus
        assert j.min_gpus in replicas
        assert j.batch_size in batches
    with pytest.raises(ValueError, match="eligible"):
        generate_pollux_workload(jobs, seed=3, n=5)
    assert generate_pollux_workload(jobs, seed=3, n=4) == wl  # seeded


@pytest.mark.slow
def test_rigid_jobs_take_the_consolidated_run_time() -> None:
    apps = load_applications()
    train, _ = split_weeks(load_philly(), TRAIN_WEEKS, VALIDATION_WEEKS)
    rows = generate_pollux_workload(train, seed=7, n=20)
    rigid = rigid_jobs(rows, apps)
    assert [j.id for j in rigid] == [r.id for r in rows]
    for r, j in zip(rows, rigid, strict=True):
        app = apps[str(r.app)]
        iters = app.iteration(float(r.batch_size or 0), app.completion_epoch) - app.iteration(
            float(r.batch_size or 0), 0
        )
        want = iters * app.iteration_time(r.min_gpus, int(r.batch_size or 0), optimus=False)
        assert j.duration_s == pytest.approx(want)
        assert j.duration_s is not None
        assert j.duration_s > 0
        assert j.estimate_s is None


def test_parse_refuses_a_bad_row() -> None:
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,5,x,5,vc\n"
    with pytest.raises(ValueError, match="row 1"):
        parse_philly(text)
    ok = parse_philly(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,5,2,10,a\n"
    )
    assert ok[0].gpu_time_s == 10.0
