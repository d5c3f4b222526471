from kairos_client.resources.clusters import AsyncClusters, Clusters
from kairos_client.resources.decisions import AsyncDecisions, Decisions
from kairos_client.resources.jobs import AsyncJobs, Jobs
from kairos_client.resources.nodes import AsyncNodes, Nodes
from kairos_client.resources.policies import AsyncPolicies, Policies

__all__ = [
    "AsyncClusters",
    "AsyncDecisions",
    "AsyncJobs",
    "AsyncNodes",
    "AsyncPolicies",
    "Clusters",
    "Decisions",
    "Jobs",
    "Nodes",
    "Policies",
]
