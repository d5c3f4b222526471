from kairos_client.resources.audit import AsyncAudit, Audit
from kairos_client.resources.clusters import AsyncClusters, Clusters
from kairos_client.resources.dags import AsyncDags, Dags
from kairos_client.resources.decisions import AsyncDecisions, Decisions
from kairos_client.resources.jobs import AsyncJobs, Jobs
from kairos_client.resources.nodes import AsyncNodes, Nodes
from kairos_client.resources.policies import AsyncPolicies, Policies
from kairos_client.resources.tunes import AsyncTunes, Tunes

__all__ = [
    "AsyncAudit",
    "AsyncClusters",
    "AsyncDags",
    "AsyncDecisions",
    "AsyncJobs",
    "AsyncNodes",
    "AsyncPolicies",
    "AsyncTunes",
    "Audit",
    "Clusters",
    "Dags",
    "Decisions",
    "Jobs",
    "Nodes",
    "Policies",
    "Tunes",
]
