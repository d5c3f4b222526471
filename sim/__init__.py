"""Trace-driven simulator: SWF traces, two semantics, metrics, evaluation, training environments.

* :mod:`app.domains.hpc.swf` — Standard Workload Format loader (RLScheduler's cleaning rules);
* :mod:`app.domains.hpc.rlscheduler` — RLScheduler's simulator, quirks included (reproduces its
tables);
* :mod:`app.domains.hpc.simulate` — replay through the service's own core
(:func:`app.domains.hpc.decision.decide`);
* :mod:`sim.engine` — :func:`~sim.engine.run_sequence`: one policy, one sequence, either semantics;
* :mod:`app.domains.hpc.metrics`, :mod:`sim.evaluate`, :mod:`sim.report`, :mod:`sim.cli` (``kairos
evaluate``);
* :mod:`app.domains.hpc.env` (Gymnasium, single and batched) training environments.

Depends on :mod:`app.domain` only (import-linter contract); importing it does no work.
"""
