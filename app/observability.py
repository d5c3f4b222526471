"""Prometheus metrics and logging setup. Metric objects live in a per-app registry built in
``create_app`` (never at import), so several apps in one process (tests) do not collide.

With several serving processes (``KAIROS_WORKERS`` > 1, ADR 0080) a scrape reaches one of them,
so ``/metrics`` must speak for all: ``kairos serve`` then points prometheus_client's multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR``, read when prometheus_client is imported) at a shared
directory. Counters and histograms are summed over every process that served, gone ones
included; the gauges over the live ones (a scrape first drops those of processes that are gone,
killed ones included). A gauge read from a callback is written to that directory by each process
once a second and when it answers a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from app.background import running
from app.outcomes import DecisionOutcome
from app.services.decision import DecisionGate

if TYPE_CHECKING:  # the database layer is not loaded by importers of the logging helpers
    from app.db.decision_writer import DecisionWriter

#: prometheus_client's own switch: set, every metric value lives in a file of this directory
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: seconds between two writes of a process's sampled gauges in multiprocess mode
GAUGE_SYNC_S = 1.0


def multiprocess_dir() -> str | None:
    """The directory the serving processes share their metrics in, if several serve."""
    return os.environ.get(MULTIPROC_ENV) or None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def prune_dead_gauges(shared_dir: str) -> None:
    """Take the live gauges of processes that are gone out of the sums.

    A process removes its own at shutdown (:meth:`Metrics.shared`); one killed with SIGKILL
    cannot, and uvicorn starts a replacement under a new pid, so its last values would be summed
    with the replacement's until the next start."""
    gone: set[int] = set()
    for path in Path(shared_dir).glob("gauge_live*_*.db"):
        tail = path.stem.rsplit("_", 1)[-1]
        if tail.isdigit() and not _alive(int(tail)):
            gone.add(int(tail))
    for pid in gone:
        mark_process_dead(pid, shared_dir)  # type: ignore[no-untyped-call]


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: buckets of requests per inference batch and of rows per decision-log commit
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, shared_dir: str | None = None) -> None:
        #: multiprocess mode (ADR 0080): the directory every serving process writes its values to
        self.shared_dir = shared_dir
        #: gauges read from a callback: (gauge, callback)
        self._sampled: list[tuple[Gauge, Callable[[], float]]] = []
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kairos_http_requests",
            "HTTP requests by route template, method and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_latency = Histogram(
            "kairos_http_request_duration_seconds",
            "HTTP request latency by route template and method.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "kairos_decisions",
            "Decisions by deciding policy, its kind and fallback reason ('none' if no fallback).",
            ["policy", "kind", "fallback_reason"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "kairos_fallback",
            "Decisions taken by the fallback heuristic, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.decision_latency = Histogram(
            "kairos_decision_latency_seconds",
            "Time to compute one decision, by the kind of policy that decided.",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

        # decision pipeline (ADR 0041): requests per inference batch, requests waiting
        self.batch_size = Histogram(
            "kairos_batch_size",
            "Requests decided together in one batch (in-process or by a worker).",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "kairos_queue_depth",
            "Decision requests waiting for a batch or a worker's reply (every serving process).",
            multiprocess_mode="livesum",
            registry=self.registry,
        )

        self.decisions_in_flight = Gauge(
            "kairos_decisions_in_flight",
            "Decisions being worked on (every serving process; KAIROS_MAX_DECISIONS_IN_FLIGHT "
            "bounds each).",
            multiprocess_mode="livesum",
            registry=self.registry,
        )
        self.admission_refused = Counter(
            "kairos_admission_refused",
            "Decisions refused with 429 overloaded, by reason (limit: "
            "KAIROS_MAX_DECISIONS_IN_FLIGHT).",
            ["reason"],
            registry=self.registry,
        )
        self.admission_refused.labels("limit")

        # decision log group commit (ADR 0023): rows stored / commits = decisions per commit
        self.decision_commits = Counter(
            "kairos_decision_commits",
            "Committed transactions of the decision log writer that stored at least one row.",
            registry=self.registry,
        )
        self.decision_rows_stored = Counter(
            "kairos_decision_rows_stored",
            "Decision rows stored by the decision log writer (duplicates not counted).",
            registry=self.registry,
        )
        self.decision_rows_per_commit = Histogram(
            "kairos_decision_rows_per_commit",
            "Decision rows stored by one commit of the decision log writer.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )

    def observe_batch(self, size: int) -> None:
        self.batch_size.observe(size)

    def _sample(self, gauge: Gauge, read: Callable[[], float]) -> None:
        if self.shared_dir is None:
            gauge.set_function(read)
        else:  # another process's scrape reads the file: write the value there (``sync``)
            self._sampled.append((gauge, read))
            gauge.set(read())

    def track_queue_depth(self, depth: Callable[[], float]) -> None:
        self._sample(self.queue_depth, depth)

    def track_admission(self, gate: DecisionGate) -> None:
        """In-flight count and refusals of the decision gate (ADR 0024)."""
        self._sample(self.decisions_in_flight, lambda: gate.in_flight)
        gate.on_refused = lambda reason: self.admission_refused.labels(reason).inc()

    def track_decision_writer(self, writer: DecisionWriter) -> None:
        """Commits and rows of the decision log's group commit (ADR 0023)."""
        writer.on_commit = self.observe_commit

    def observe_commit(self, rows: int) -> None:
        self.decision_commits.inc()
        self.decision_rows_stored.inc(rows)
        self.decision_rows_per_commit.observe(rows)

    def sync(self) -> None:
        """Write this process's sampled gauges where every process's scrape reads them."""
        for gauge, read in self._sampled:
            gauge.set(read())

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """While serving in multiprocess mode: keep this process's gauges current for the
        others' scrapes; on the way out, take its live gauges out of the sums."""
        if self.shared_dir is None:
            yield
            return

        async def keep_synced() -> None:
            while True:
                await asyncio.sleep(GAUGE_SYNC_S)
                self.sync()

        try:
            async with running(keep_synced(), "metrics-gauge-sync"):
                yield
        finally:
            mark_process_dead(os.getpid(), self.shared_dir)  # type: ignore[no-untyped-call]

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.request_latency.labels(method, route).observe(seconds)

    def observe_decision(self, outcome: DecisionOutcome) -> None:
        reason = outcome.fallback_reason or "none"
        self.decisions.labels(outcome.policy.name, outcome.policy.kind, reason).inc()
        if outcome.fallback_used:
            self.fallbacks.labels(reason).inc()
        self.decision_latency.labels(outcome.policy.kind).observe(outcome.latency_ms / 1000.0)

    def render(self) -> bytes:
        if self.shared_dir is None:
            return generate_latest(self.registry)
        self.sync()
        prune_dead_gauges(self.shared_dir)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.shared_dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


#: Kairos' own log line format (the root logger's)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: redacted in place of a secret
REDACTED = "[redacted]"
#: a query parameter (or form field) whose name contains one of these holds a secret
_SECRET_WORD = r"key|token|passw(?:or)?d|pwd|secret|auth|session|credential|signature|sig"
_SECRET_NAME = re.compile(rf"[\w.\-]*(?:{_SECRET_WORD})[\w.\-]*", re.IGNORECASE)
#: ``name=value`` after a query-string separator, raw or percent-encoded (a URL inside a query)
_SECRET_PARAM = re.compile(
    rf"((?:^|[?&;\s]|%3F|%26)(?:{_SECRET_NAME.pattern})(?:=|%3D))((?:(?!%26)[^&#;\s\"'])*)",
    re.IGNORECASE,
)
#: an ``Authorization`` header's credentials, however it is written out
_CREDENTIALS = re.compile(
    r"(\b(?:bearer|basic|digest)\s+)[^\s\"',;)]+"
    r"|(\bauthorization[\"']?\s*[:=,]\s*(?:b?[\"'])?)[^\"'\n]+",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` holds a secret (``key``, ``api_key``,
    ``token``, ``password``, ``secret``, ...): never logged, never accepted in a URL."""
    return _SECRET_NAME.fullmatch(name) is not None


def redact_secrets(text: str) -> str:
    """``text`` with the values of secret-looking query parameters and any credentials of an
    ``Authorization`` header replaced by :data:`REDACTED`."""

    def credentials(match: re.Match[str]) -> str:
        return (match.group(1) or match.group(2)) + REDACTED

    text = _SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED if m.group(2) else m.group(0), text)
    return _CREDENTIALS.sub(credentials, text)


_EXCEPTION_FORMATTER = logging.Formatter()


class RedactSecrets(logging.Filter):
    """A handler filter that takes secrets out of every record it passes (message and string
    arguments, element by element so that uvicorn's access formatter still unpacks its five
    arguments; the traceback too): request lines carrying ``?key=...`` and the like, and
    ``Authorization`` values."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_secrets(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:  # formatters print a cached exc_text
            record.exc_text = _EXCEPTION_FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secrets(record.exc_text)
        return True


def _redact_arg(value: object) -> object:
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, bytes):
        return redact_secrets(value.decode("latin-1")).encode("latin-1")
    return value


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    logging.getLogger("app").setLevel(level.upper())
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging configuration with :class:`RedactSecrets` on every handler (its access
    log writes each request line, query string included), and a root handler in Kairos' format
    with the same filter. It is applied in every serving process, spawned workers included."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact_secrets": {"()": f"{__name__}.RedactSecrets"}}
    config["formatters"]["kairos"] = {"format": LOG_FORMAT}
    config["handlers"]["kairos"] = {
        "formatter": "kairos",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    for handler in config["handlers"].values():
        handler["filters"] = ["redact_secrets"]
    config["root"] = {"handlers": ["kairos"], "level": level.upper()}
    config["loggers"]["app"] = {"level": level.upper()}
    return config
