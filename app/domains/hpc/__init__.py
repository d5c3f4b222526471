"""The HPC batch-queue domain (RLScheduler's problem): gangs of identical tasks on nodes with
resource vectors, a priority order and EASY backfilling.

Where things live:

* :mod:`.types`: the state types (``ClusterState``, ``Job``, ``Node``, ``Decision``);
* :mod:`.decision`: snapshot validation and the decision run (EASY rules (a) and (b));
* :mod:`.heuristics`: the score heuristics (FCFS, SJF, F1-F4, WFP3, UNICEP, ...);
* :mod:`.encoding`: the ``kairos-hpc-v1`` feature encoder;
* :mod:`.codec`: the one JSON form of a snapshot and a decision;
* :mod:`.simulate` and :mod:`.rlscheduler`: the simulator semantics (``kairos``,
  ``rlscheduler``); :mod:`.swf`: SWF traces; :mod:`.env`: the Gymnasium env;
  :mod:`.metrics`: the metrics.

Importing this package does no work; :data:`DOMAIN` binds the functions lazily.
"""
