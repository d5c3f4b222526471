"""Trace-driven simulator: SWF traces, two semantics, metrics, evaluation, training environments.

* :mod:`sim.traces.swf` — Standard Workload Format loader (RLScheduler's cleaning rules);
* :mod:`sim.rlscheduler` — RLScheduler's simulator, quirks included (reproduces its tables);
* :mod:`sim.kairos` — replay through the service's own core (:func:`app.domain.decision.decide`);
* :mod:`sim.engine` — :func:`~sim.engine.run_sequence`: one policy, one sequence, either semantics;
* :mod:`sim.metrics`, :mod:`sim.evaluate`, :mod:`sim.report`, :mod:`sim.cli` (``kairos evaluate``);
* :mod:`sim.env` (Gymnasium) and :mod:`sim.vecenv` (batched) training environments.

Depends on :mod:`app.domain` only (import-linter contract); importing it does no work.
"""
