"""Prometheus metrics and logging setup. Metric objects live in a per-app registry built in
``create_app`` (never at import), so several apps in one process (tests) do not collide."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from app.services.decision import DecisionGate, DecisionOutcome

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
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
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "kairos_queue_depth",
            "Decision requests of this process waiting for a batch or a worker's reply.",
            registry=self.registry,
        )

        self.decisions_in_flight = Gauge(
            "kairos_decisions_in_flight",
            "Decisions this process is working on (KAIROS_MAX_DECISIONS_IN_FLIGHT bounds it).",
            registry=self.registry,
        )
        self.admission_limit = Gauge(
            "kairos_admission_limit",
            "Decisions this process admits at once under KAIROS_ADMISSION=deadline: an AIMD "
            "limit that shrinks while decisions miss their deadline (ADR 0077).",
            registry=self.registry,
        )

    def observe_batch(self, size: int) -> None:
        self.batch_size.observe(size)

    def track_queue_depth(self, depth: Callable[[], float]) -> None:
        self.queue_depth.set_function(depth)

    def track_admission(self, gate: DecisionGate) -> None:
        """In-flight count, adaptive limit and refusals of the decision gate (ADRs 0075, 0077)."""
        self.decisions_in_flight.set_function(lambda: gate.in_flight)
        self.admission_limit.set_function(lambda: int(gate.adaptive_limit))
        self.registry.register(_RefusalCollector(gate))

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
        return generate_latest(self.registry)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("app").setLevel(level.upper())


class _RefusalCollector(Collector):
    """``kairos_admission_refused_total{reason}``, read from the gate's own counts."""

    def __init__(self, gate: DecisionGate) -> None:
        self._gate = gate

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kairos_admission_refused",
            "Decisions refused with 429 overloaded, by reason (limit: "
            "KAIROS_MAX_DECISIONS_IN_FLIGHT; deadline: KAIROS_ADMISSION=deadline).",
            labels=["reason"],
        )
        for reason, count in sorted(self._gate.refused.items()):
            family.add_metric([reason], float(count))
        yield family
