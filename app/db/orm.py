"""ORM records (``*Record``). Schema changes go through Alembic migrations in ``migrations/``.

Every row an API caller can see belongs to a tenant: clusters carry ``tenant`` and everything under
a cluster reaches it through ``cluster_pk``; decisions carry ``tenant`` themselves because
``/v1/decide`` decisions have no cluster. Relationships are ``lazy="raise"``: repositories load
what they need explicitly.

Times that belong to the scheduling domain (submit, start, end) are epoch seconds (``Double``);
audit timestamps are timezone-aware ``DateTime``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.kernel.clock import utc_now

TENANT_LEN = 64
ID_LEN = 128
POLICY_LEN = 160

JSONDict = dict[str, Any]
JSONList = list[Any]


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utc_now, onupdate=utc_now
    )


class ClusterRecord(TimestampMixin, Base):
    __tablename__ = "clusters"
    __table_args__ = (UniqueConstraint("tenant", "id"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    id: Mapped[str] = mapped_column(String(ID_LEN))
    name: Mapped[str | None] = mapped_column(String(256))
    resources: Mapped[JSONList] = mapped_column(JSON)
    policy: Mapped[str] = mapped_column(String(POLICY_LEN))
    fallback: Mapped[str] = mapped_column(String(POLICY_LEN))
    backfill: Mapped[str] = mapped_column(String(16))
    placement: Mapped[str] = mapped_column(String(16))
    #: Computed beside the primary on every decision, stored, never served (pipeline issue).
    shadow_policy: Mapped[str | None] = mapped_column(String(POLICY_LEN))
    labels: Mapped[JSONDict] = mapped_column(JSON)
    #: The scheduling domain (``app.domains``) whose rules decide the cluster; fixed at creation.
    domain: Mapped[str] = mapped_column(String(16), default="hpc", server_default="hpc")
    #: The domain's cluster settings (``ClusterUpsert.<domain>``), JSON; ``None`` for hpc.
    domain_config: Mapped[JSONDict | None] = mapped_column(JSON, default=None)


class NodeRecord(TimestampMixin, Base):
    __tablename__ = "nodes"
    __table_args__ = (UniqueConstraint("cluster_pk", "id"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_pk: Mapped[int] = mapped_column(ForeignKey("clusters.pk", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(ID_LEN))
    capacity: Mapped[JSONDict] = mapped_column(JSON)
    #: Sum of the running jobs' placements; changed only under the cluster lock.
    allocated: Mapped[JSONDict] = mapped_column(JSON)
    labels: Mapped[JSONDict] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(8))


class DecisionRecord(Base):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_tenant_cluster_pk_pk", "tenant", "cluster_pk", "pk"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    #: Idempotency key of the decision request: the pipeline stores a decision once per request.
    request_id: Mapped[str] = mapped_column(String(ID_LEN * 2), unique=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    cluster_pk: Mapped[int | None] = mapped_column(ForeignKey("clusters.pk", ondelete="CASCADE"))
    cluster_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    policy_name: Mapped[str] = mapped_column(String(POLICY_LEN))
    policy_version: Mapped[str] = mapped_column(String(64))
    policy_kind: Mapped[str] = mapped_column(String(16))
    fallback_used: Mapped[bool] = mapped_column(Boolean)
    fallback_reason: Mapped[str | None] = mapped_column(String(64))
    shadow_policy: Mapped[str | None] = mapped_column(String(POLICY_LEN))
    shadow_allocations: Mapped[JSONList | None] = mapped_column(JSON)
    allocations: Mapped[JSONList] = mapped_column(JSON)
    reservations: Mapped[JSONList] = mapped_column(JSON)
    queue_length: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float] = mapped_column(Double)
    dry_run: Mapped[bool] = mapped_column(Boolean)
    explain: Mapped[JSONDict | None] = mapped_column(JSON)
    #: The input of rows stored before ``input_blob`` existed (migration 0004); NULL since.
    input_snapshot: Mapped[JSONDict | None] = mapped_column(JSON(none_as_null=True))
    #: The input, zlib-compressed JSON (:mod:`app.db.decision_input`, ADR 0097).
    input_blob: Mapped[bytes | None] = mapped_column(LargeBinary)
    #: GPU domain: the running jobs the decision stops (``[job_id]``); NULL for other domains.
    preemptions: Mapped[JSONList | None] = mapped_column(JSON, default=None)
    #: GPU domain: running jobs' new allocations (``allocations``' shape); NULL for others.
    resizes: Mapped[JSONList | None] = mapped_column(JSON, default=None)


class JobRecord(TimestampMixin, Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("cluster_pk", "id"),
        Index("ix_jobs_cluster_pk_state_pk", "cluster_pk", "state", "pk"),
    )

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_pk: Mapped[int] = mapped_column(ForeignKey("clusters.pk", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(ID_LEN))
    #: The JobSpec as accepted (defaults filled in, submit_time resolved).
    spec: Mapped[JSONDict] = mapped_column(JSON)
    #: sha256 of the spec as the client sent it: same id + same hash is an idempotent resubmit.
    spec_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    submit_time: Mapped[float] = mapped_column(Double)
    placements: Mapped[JSONList | None] = mapped_column(JSON)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    decision_id: Mapped[str | None] = mapped_column(ForeignKey("decisions.id", ondelete="SET NULL"))


class GpuJobServiceRecord(Base):
    """A job's service on a gpu cluster, tracked from Kairos's own decisions (never from the
    caller): counters advanced to ``accounted_at`` by the rounds that saw the job running (a
    running job accrues its GPUs x seconds, and its restart delay runs down, from then on)."""

    __tablename__ = "gpu_job_service"

    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.pk", ondelete="CASCADE"), primary_key=True)
    attained_gpu_s: Mapped[float] = mapped_column(Double)
    executed_s: Mapped[float] = mapped_column(Double)
    starts: Mapped[int] = mapped_column(Integer)
    preemptions: Mapped[int] = mapped_column(Integer)
    restart_left_s: Mapped[float] = mapped_column(Double)
    accounted_at: Mapped[float | None] = mapped_column(Double)


class JobEventRecord(Base):
    __tablename__ = "job_events"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.pk", ondelete="CASCADE"), index=True)
    type: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(Double)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class IdempotencyKeyRecord(Base):
    """A POST's stored response, replayed when the same ``Idempotency-Key`` comes again."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("tenant", "key"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    key: Mapped[str] = mapped_column(String(255))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(1024))
    #: sha256 over method, path and body: same key with another request is a conflict.
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utc_now, index=True
    )


class AuditEventRecord(Base):
    """One thing a tenant did (``action``, e.g. ``policy.upload``, on ``subject``, e.g.
    ``name@version``), written in the transaction of the action itself; never changed."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_tenant_pk", "tenant", "pk"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(256))
    details: Mapped[JSONDict] = mapped_column(JSON)


class DagRecord(TimestampMixin, Base):
    """A DAG job of a ``dag`` cluster (``POST /v1/clusters/{id}/dags``); each of its stages is a
    :class:`DagStageRecord` and a :class:`JobRecord` ``"{dag_id}:{stage_id}"``."""

    __tablename__ = "dags"
    __table_args__ = (
        UniqueConstraint("cluster_pk", "id"),
        Index("ix_dags_cluster_pk_state_pk", "cluster_pk", "state", "pk"),
    )

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_pk: Mapped[int] = mapped_column(ForeignKey("clusters.pk", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(ID_LEN))
    #: The DagSpec as accepted (defaults filled in, submit_time resolved).
    spec: Mapped[JSONDict] = mapped_column(JSON)
    #: sha256 of the spec as the client sent it: same id + same hash is an idempotent resubmit.
    spec_hash: Mapped[str] = mapped_column(String(64))
    #: pending (no task launched), running, finished, cancelled, failed
    state: Mapped[str] = mapped_column(String(16))
    submit_time: Mapped[float] = mapped_column(Double)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    #: When a stage of the DAG last returned slots to the pool and no round has run since, and
    #: how many it returned: the next round's source job (Decima's trigger) when every free slot
    #: is one of them; both cleared by every applied round.
    released_at: Mapped[float | None] = mapped_column(Double)
    released_slots: Mapped[int] = mapped_column(Integer, default=0)


class DagStageRecord(Base):
    """Progress of one stage. Invariants (kept under the cluster lock):
    ``0 <= finished <= launched <= tasks`` and ``running == launched - finished`` (every running
    slot holds one launched, unfinished task); the stage job's ``placements`` hold ``running``
    slots in all."""

    __tablename__ = "dag_stages"
    __table_args__ = (UniqueConstraint("dag_pk", "stage_id"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_pk: Mapped[int] = mapped_column(ForeignKey("dags.pk", ondelete="CASCADE"), index=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.pk", ondelete="CASCADE"), unique=True)
    stage_id: Mapped[str] = mapped_column(String(ID_LEN))
    #: the stage's index in the DagSpec
    position: Mapped[int] = mapped_column(Integer)
    launched: Mapped[int] = mapped_column(Integer, default=0)
    finished: Mapped[int] = mapped_column(Integer, default=0)
    #: slots holding a task of this stage
    running: Mapped[int] = mapped_column(Integer, default=0)
    #: slots the last applied round reserved for the stage (parents saturated, not finished)
    reserved: Mapped[int] = mapped_column(Integer, default=0)
    #: the policy's executor cap for the DAG at the stage's last grant or reservation
    parallelism_limit: Mapped[int | None] = mapped_column(Integer)


class TuneRecord(TimestampMixin, Base):
    """One tuning of a cluster's policy from its own finished jobs (``POST .../tune``).

    ``state``: ``queued`` -> ``running`` -> ``succeeded`` | ``failed``; a ``running`` row whose
    ``lease_until`` (epoch seconds) has passed belongs to a replica that stopped, and is failed
    by the next replica that looks. ``phase`` says what the result is to the cluster: ``none``
    (nothing to serve), ``shadow`` (its cluster's shadow policy), ``primary`` (promoted),
    ``retired`` (replaced since)."""

    __tablename__ = "tunes"
    __table_args__ = (
        Index("ix_tunes_tenant_cluster_pk_pk", "tenant", "cluster_pk", "pk"),
        Index("ix_tunes_state", "state"),
    )

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    cluster_pk: Mapped[int] = mapped_column(ForeignKey("clusters.pk", ondelete="CASCADE"))
    cluster_id: Mapped[str] = mapped_column(String(ID_LEN))
    state: Mapped[str] = mapped_column(String(16))
    phase: Mapped[str] = mapped_column(String(16), default="none")
    #: the request (backfill, time budget, seed, ...) with defaults filled in
    params: Mapped[JSONDict] = mapped_column(JSON)
    #: the cluster's primary policy when the tune was asked for
    baseline_policy: Mapped[str] = mapped_column(String(POLICY_LEN))
    #: finished jobs in the history the procedure ran on
    history_jobs: Mapped[int | None] = mapped_column(Integer)
    #: the latest progress report of the procedure (``{"stage", "fraction", ...}``)
    progress: Mapped[JSONDict | None] = mapped_column(JSON)
    #: the procedure's result: winner, kind, validation table, card
    result: Mapped[JSONDict | None] = mapped_column(JSON)
    #: what the result serves as: the registered tenant policy (``name@version``) or the
    #: recommended heuristic; None until it succeeds
    policy: Mapped[str | None] = mapped_column(String(POLICY_LEN))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    #: the replica running it, and until when its claim holds unless renewed
    owner: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[float | None] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double)
    finished_at: Mapped[float | None] = mapped_column(Double)
