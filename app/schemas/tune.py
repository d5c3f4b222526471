"""Tuning a cluster's policy from its own history (``POST /v1/clusters/{id}/tune``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from app.schemas.common import ReadSchema, Schema

TuneState = Literal["queued", "running", "succeeded", "failed"]
#: what a tune's result is to its cluster: nothing to serve, the shadow policy, the primary,
#: replaced since
TunePhase = Literal["none", "shadow", "primary", "retired"]

#: the largest time budget one tune may ask for (issue 21: 600 s for up to 100,000 jobs)
MAX_TIME_BUDGET_S = 600.0
#: the most (newest) finished jobs a tune reads
MAX_HISTORY_JOBS = 100_000
MAX_WINDOW_LENGTH = 1024
MIN_WINDOW_LENGTH = 8


class TuneCreate(Schema):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"time_budget_s": 600, "seed": 0}]},
    )

    #: the backfilling mode every simulation uses; default: the cluster's
    backfill: Literal["easy", "none"] | None = None
    #: wall-clock bound of the procedure (validation, training, output)
    time_budget_s: Annotated[
        float, Field(gt=0, le=MAX_TIME_BUDGET_S, allow_inf_nan=False, strict=True)
    ] = MAX_TIME_BUDGET_S
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 0
    #: jobs per training and validation window; the history must hold at least two windows
    window_length: Annotated[
        int, Field(ge=MIN_WINDOW_LENGTH, le=MAX_WINDOW_LENGTH, strict=True)
    ] = MAX_WINDOW_LENGTH
    #: the newest this many finished jobs are the history
    max_history: Annotated[int, Field(ge=1, le=MAX_HISTORY_JOBS, strict=True)] = MAX_HISTORY_JOBS
    #: refuse (422) a history of fewer finished jobs than this (beside the procedure's own
    #: minimum of two windows)
    min_history: Annotated[int, Field(ge=1, le=MAX_HISTORY_JOBS, strict=True)] = 1
    #: the ranking model to start from (``name[@version]``); default: the cluster's policy when
    #: it is one, else the shipped default for the backfilling mode
    from_policy: Annotated[str, Field(min_length=1, max_length=160)] | None = None
    #: promote the result at once when it passes the guard (else it stays in shadow mode)
    auto_promote: bool = False


class TunePromote(Schema):
    #: promote even when the guard refuses (the audit log records it as forced)
    force: bool = False


class TuneProgress(ReadSchema):
    #: in [0, 1], rising
    fraction: float
    message: str


class ValidationRowRead(ReadSchema):
    candidate: str
    kind: Literal["model", "heuristic"]
    #: mean over the validation windows of each window's average bounded slowdown
    avg_bsld: float
    #: ``avg_bsld`` over the best heuristic's
    ratio: float
    #: the same ratio on windows of the earlier history (None: the procedure ran none)
    earlier_ratio: float | None = None
    #: what the procedure's own guard ranks by (None: not reported)
    score: float | None = None


class TuneResultRead(ReadSchema):
    #: the winning candidate of the validation table
    winner: str
    kind: Literal["model", "heuristic"]
    #: what the result serves as: the tenant policy it registered (``name@version``), or the
    #: recommended heuristic (nothing registered)
    policy: str
    #: the heuristic the tune recommends, when one won
    recommendation: str | None = None
    #: every candidate on the same validation windows, best first
    table: list[ValidationRowRead]
    #: the model card (the procedure's record: ranges, windows, seed, the table)
    card: dict[str, Any]


class TuneError(ReadSchema):
    code: str
    message: str


class TuneRead(ReadSchema):
    id: str
    cluster_id: str
    state: TuneState
    phase: TunePhase
    #: epoch seconds
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    #: the request with defaults filled in
    params: dict[str, Any]
    #: the cluster's primary policy when the tune was asked for
    baseline_policy: str
    #: the ranking model tuning started from (``name@version``; None: the shipped default)
    from_policy: str | None = None
    #: finished jobs in the history the procedure ran on
    history_jobs: int | None = None
    progress: TuneProgress | None = None
    result: TuneResultRead | None = None
    #: why the tune failed (state ``failed``)
    error: TuneError | None = None


class GuardRead(ReadSchema):
    """The promotion guard: the result against the cluster's current policy on the tune's
    validation windows."""

    passed: bool
    #: the cluster's primary policy when the promotion was asked for
    current_policy: str
    #: the table's row of the current policy (None: it was not validated by this tune)
    current_avg_bsld: float | None = None
    candidate_avg_bsld: float
    reason: str


class TunePromoteRead(ReadSchema):
    tune: TuneRead
    #: the cluster's primary policy now, and before the promotion
    policy: str
    previous_policy: str
    forced: bool
    guard: GuardRead
