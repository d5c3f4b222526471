"""The DAG domain: jobs are DAGs of stages, each stage many independent tasks sharing executors
(Decima, Graphene).  Types and validation (:mod:`.types`), the policy view (:mod:`.policy`), the
heuristics (:mod:`.heuristics`), one decision on a snapshot (:mod:`.decision`), the TPC-H data
(:mod:`.tpch`), the simulator (:mod:`.simulate`) and its metrics (:mod:`.metrics`)."""
