"""Response models and request parameter shapes."""

from kairos_client.types.audit import AuditEvent
from kairos_client.types.cluster import Cluster
from kairos_client.types.dag import (
    Dag,
    DagSettings,
    DagSettingsParam,
    DagSpecParam,
    DagStage,
    DagState,
    DagStateParam,
    RoundTriggerParam,
    StageProgressParam,
    StageSpecParam,
)
from kairos_client.types.decision import (
    Allocation,
    Decision,
    DecisionDetail,
    Fallback,
    PolicyRef,
    Reservation,
    Shadow,
)
from kairos_client.types.gpu import (
    GpuJobParam,
    GpuNodeParam,
    GpuPlacementParam,
    GpuService,
    GpuSettings,
    GpuSettingsParam,
)
from kairos_client.types.job import Job, JobEventType, JobState, JobWarning
from kairos_client.types.node import Node
from kairos_client.types.params import (
    JobCreateParam,
    JobSpecParam,
    NodeParam,
    PlacementParam,
    RunningJobParam,
    SnapshotNodeParam,
)
from kairos_client.types.policy import Policy
from kairos_client.types.shadow import ShadowPolicyStats, ShadowReport
from kairos_client.types.shared import Placement
from kairos_client.types.tune import (
    PromotionGuard,
    Tune,
    TuneError,
    TunePhase,
    TuneProgress,
    TunePromotion,
    TuneResult,
    TuneState,
    ValidationRow,
)

__all__ = [
    "Allocation",
    "AuditEvent",
    "Cluster",
    "Dag",
    "DagSettings",
    "DagSettingsParam",
    "DagSpecParam",
    "DagStage",
    "DagState",
    "DagStateParam",
    "Decision",
    "DecisionDetail",
    "Fallback",
    "GpuJobParam",
    "GpuNodeParam",
    "GpuPlacementParam",
    "GpuService",
    "GpuSettings",
    "GpuSettingsParam",
    "Job",
    "JobCreateParam",
    "JobEventType",
    "JobSpecParam",
    "JobState",
    "JobWarning",
    "Node",
    "NodeParam",
    "Placement",
    "PlacementParam",
    "Policy",
    "PolicyRef",
    "PromotionGuard",
    "Reservation",
    "RoundTriggerParam",
    "RunningJobParam",
    "Shadow",
    "ShadowPolicyStats",
    "ShadowReport",
    "SnapshotNodeParam",
    "StageProgressParam",
    "StageSpecParam",
    "Tune",
    "TuneError",
    "TunePhase",
    "TuneProgress",
    "TunePromotion",
    "TuneResult",
    "TuneState",
    "ValidationRow",
]
