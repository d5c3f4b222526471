"""Service configuration: every field is read from a ``KAIROS_``-prefixed environment variable.

``get_settings()`` is cached; tests build ``Settings(...)`` explicitly and pass it to
``app.main.create_app`` instead of mutating the environment.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Tenant used for every request when ``KAIROS_API_KEYS`` is unset (auth off).
DEFAULT_TENANT = "default"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KAIROS_", extra="ignore", frozen=True)

    HOST: str = "127.0.0.1"
    PORT: int = Field(default=8000, ge=0, le=65535)
    #: ``sqlite:///path`` or ``postgresql://user@host:port/db``; the service picks the drivers.
    DATABASE_URL: str = "sqlite:///./kairos.db"
    #: Unset: decisions are batched in-process. Set: requests go through Redis Streams.
    REDIS_URL: str | None = None
    LOG_LEVEL: Literal["critical", "error", "warning", "info", "debug"] = "info"
    #: ``tenant:key`` pairs separated by commas, e.g. ``acme:s3cr3t,globex:k2``. A tenant may
    #: have several keys. Unset or empty: auth is off and every caller is tenant ``default``.
    API_KEYS: str | None = None
    #: Largest accepted request body (a 10,000-job batch is about 2 MB).
    MAX_BODY_BYTES: int = Field(default=8 * 1024 * 1024, gt=0)
    #: Deadline for the primary policy of one decision that names none (``deadline_ms``); past
    #: it the fallback heuristic decides. It grows with the snapshot: a decision on N nodes, P
    #: pending and R running jobs gets ``DEFAULT_DEADLINE_MS + DEADLINE_MS_PER_1K_ITEMS * (N + P
    #: + R) / 1000`` (``default_deadline_ms``): 58 ms for 16 nodes x 64 jobs, 1.55 s for 5,000
    #: nodes x 10,000 jobs with the defaults.
    DEFAULT_DEADLINE_MS: float = Field(default=50.0, gt=0)
    #: The default deadline's growth per 1,000 nodes and jobs of the snapshot (0: a fixed
    #: DEFAULT_DEADLINE_MS).
    DEADLINE_MS_PER_1K_ITEMS: float = Field(default=100.0, ge=0)
    #: A dag round's learned policy picks one stage per model call, up to one call per free slot
    #: and stage: its default deadline grows by this much per such call (see ``dag_rounds``).
    DEADLINE_MS_PER_DAG_STEP: float = Field(default=5.0, ge=0)
    #: Decisions one process works on at once (``/v1/decide``, ``/schedule``); one more is
    #: refused with 429 ``overloaded`` and ``Retry-After`` instead of queueing (ADR 0024).
    #: 0: no limit.
    MAX_DECISIONS_IN_FLIGHT: int = Field(default=1024, ge=0)
    #: ``Retry-After`` (seconds) of a decision refused with 429 ``overloaded``.
    RETRY_AFTER_S: int = Field(default=1, ge=1)
    BATCH_MAX_SIZE: int = Field(default=32, ge=1)
    BATCH_MAX_WAIT_MS: float = Field(default=2.0, ge=0)
    #: Wait BATCH_MAX_WAIT_MS for batch-mates only once batches hold several requests (ADR 0045).
    BATCH_ADAPTIVE_WAIT: bool = True
    #: Freeze the start-up heap out of the garbage collector's full passes (ADR 0068).
    GC_FREEZE: bool = True
    #: Allocations between two collections of the garbage collector's youngest generation (and,
    #: with the older generations' thresholds of 10 and 10, a hundred times that between two
    #: full passes over the live heap; ADR 0053); 0: the interpreter's own (700).
    GC_GEN0_THRESHOLD: int = Field(default=50_000, ge=0)
    #: Where uploads (``<MODELS_DIR>/_tenants/<owner>/...``, ADR 0088) and a deployment's own
    #: models (``<MODELS_DIR>/<name>/<version>/policy.onnx`` + ``card.json``) live; relative to
    #: the working directory, created on the first upload. The models shipped with Kairos come
    #: from the installed package whatever this is (SHIPPED_MODELS); a name with a directory
    #: here is read from here alone, every other name from the package (ADR 0089).
    MODELS_DIR: str = "models"
    #: Read the models installed with the package (``app/shipped_models``: in a checkout, its
    #: ``models/``) for the names MODELS_DIR has no directory of. False: MODELS_DIR alone.
    SHIPPED_MODELS: bool = True
    #: Seconds between looks for models another process sharing MODELS_DIR installed, so that
    #: every process knows them and means the same newest version (ADR 0086). 0: never.
    MODELS_RESCAN_S: float = Field(default=2.0, ge=0)
    #: Decision pipeline (ADRs 0040-0043): onnxruntime threads per session, in-process batches
    #: run at once, candidates the policy sees, and the Redis stream's prefix, reclaim idle time
    #: and reply TTL.
    ONNX_INTRA_OP_THREADS: int = Field(default=1, ge=1)
    ONNX_INTER_OP_THREADS: int = Field(default=1, ge=1)
    BATCH_CONCURRENCY: int = Field(default=1, ge=1)
    MAX_CANDIDATES: int = Field(default=128, ge=1)
    REDIS_PREFIX: str = "kairos"
    REDIS_CLAIM_IDLE_MS: int = Field(default=5_000, ge=1)
    REDIS_REPLY_TTL_S: int = Field(default=60, ge=1)
    #: Defaults for clusters (and ``/v1/decide`` calls) that do not name their own: one learned
    #: policy per backfilling mode, each trained in that mode (ADR 0003, docs/results.md).
    DEFAULT_POLICY: str = "hpc-kernel"
    DEFAULT_POLICY_NO_BACKFILL: str = "hpc-kernel-none"
    DEFAULT_FALLBACK: str = "f1"
    #: The default policy of ``gpu`` and ``dag`` clusters (see :meth:`default_domain_policy`).
    DEFAULT_GPU_POLICY: str = "gpu-v1"
    DEFAULT_DAG_POLICY: str = "dag-v1"
    DEFAULT_BACKFILL: Literal["easy", "none"] = "easy"
    DEFAULT_PLACEMENT: Literal["first_fit", "best_fit", "tetris"] = "first_fit"
    #: Upgrade the schema on start when it is behind the newest migration.
    AUTO_MIGRATE: bool = True
    #: Seconds the start waits for an unreachable database (the schema check retried with
    #: backoff) before it fails; 0: fail at the first refused or timed-out connection.
    DB_STARTUP_WAIT_S: float = Field(default=30.0, ge=0)
    DB_POOL_SIZE: int = Field(default=10, ge=1)
    DB_MAX_OVERFLOW: int = Field(default=20, ge=0)
    #: Seconds SQLite waits on a locked database before giving up.
    SQLITE_BUSY_TIMEOUT_S: float = Field(default=30.0, gt=0)
    #: How long an ``Idempotency-Key`` is remembered (0: forever); past it the key is new again
    #: and a background purge deletes it, every IDEMPOTENCY_PURGE_INTERVAL_S (ADR 0021).
    IDEMPOTENCY_TTL_S: int = Field(default=86_400, ge=0)
    IDEMPOTENCY_PURGE_INTERVAL_S: float = Field(default=600.0, gt=0)
    #: Worker processes of ``kairos serve``, each on its own ``SO_REUSEPORT`` socket (ADR 0084).
    WORKERS: int = Field(default=1, ge=1)
    #: With WORKERS > 1: the directory the worker processes share their metrics in, so that
    #: ``/metrics`` of any of them speaks for all (ADR 0080; emptied at start). Unset: a new
    #: temporary directory, removed at exit.
    METRICS_DIR: str | None = None
    #: With WORKERS > 1: a worker whose event loop has not beaten for this long is replaced
    #: (ADR 0084).
    WORKER_HANG_TIMEOUT_S: float = Field(default=10.0, gt=0)
    #: Where the workers of ``kairos serve`` beat (set by it for them; unset: a temporary one).
    HEARTBEAT_DIR: str | None = None

    def api_key_tenants(self) -> dict[str, str]:
        """Map each API key to its tenant; empty when auth is off."""
        keys: dict[str, str] = {}
        for raw in (self.API_KEYS or "").split(","):
            item = raw.strip()
            if not item:
                continue
            tenant, sep, key = item.partition(":")
            if not sep or not tenant.strip() or not key.strip():
                raise ValueError(f"KAIROS_API_KEYS entry {item!r} is not 'tenant:key'")
            keys[key.strip()] = tenant.strip()
        return keys

    def default_deadline_ms(self, items: int) -> float:
        """The deadline of a decision on a snapshot of ``items`` nodes and jobs (pending and
        running) that names none: DEFAULT_DEADLINE_MS + DEADLINE_MS_PER_1K_ITEMS per 1,000."""
        return self.DEFAULT_DEADLINE_MS + self.DEADLINE_MS_PER_1K_ITEMS * max(0, items) / 1000.0

    def default_domain_policy(self, domain: str) -> str | None:
        """The shipped learned policy a new ``gpu`` or ``dag`` cluster decides with when it
        names none (the domain's fallback heuristic when that model is not installed)."""
        return {"gpu": self.DEFAULT_GPU_POLICY, "dag": self.DEFAULT_DAG_POLICY}.get(domain)

    def default_policy_for(self, backfill: str) -> str:
        """The policy of a cluster or decide call that names none, given its backfilling mode."""
        return self.DEFAULT_POLICY if backfill == "easy" else self.DEFAULT_POLICY_NO_BACKFILL


@lru_cache
def get_settings() -> Settings:
    return Settings()
