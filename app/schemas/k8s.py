"""kube-scheduler extender wire format (PascalCase JSON), as kube-scheduler sends and expects it.

Only the parts Kairos reads are typed; everything else in a Pod or Node is accepted and ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.schemas.common import CLOSED_MAP, NO_NUL_PATTERN, Id


class K8sSchema(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


Text = Annotated[str, StringConstraints(max_length=253, pattern=NO_NUL_PATTERN)]
Quantity = (
    Annotated[str, StringConstraints(max_length=64)]
    | Annotated[float, Field(ge=0, le=1e18, allow_inf_nan=False)]
)


class ResourceRequirements(K8sSchema):
    requests: dict[Annotated[str, StringConstraints(max_length=253)], Quantity] = Field(
        default_factory=dict
    )
    limits: dict[Annotated[str, StringConstraints(max_length=253)], Quantity] = Field(
        default_factory=dict
    )


class Container(K8sSchema):
    name: Text = ""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodSpec(K8sSchema):
    containers: list[Container] = Field(default_factory=list, max_length=256)
    init_containers: list[Container] = Field(
        default_factory=list, alias="initContainers", max_length=256
    )
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)] | None = None


class ObjectMeta(K8sSchema):
    name: Text = ""
    namespace: Text = "default"
    #: The pod's UID, the id of its Kairos job: required, and a Kairos id.
    uid: Id
    annotations: dict[Text, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict, json_schema_extra=CLOSED_MAP
    )


class Pod(K8sSchema):
    """The parts of a ``v1.Pod`` the extender reads."""

    metadata: ObjectMeta
    spec: PodSpec = Field(default_factory=PodSpec)


class ExtenderArgs(K8sSchema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "Pod": {
                        "metadata": {"name": "trainer", "namespace": "ml", "uid": "0b5e7c1a-1"},
                        "spec": {
                            "containers": [
                                {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
                            ]
                        },
                    },
                    "NodeNames": ["n1", "n2"],
                }
            ]
        }
    )

    pod: Pod = Field(alias="Pod")
    nodes: dict[str, Any] | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")


class ExtenderFilterResult(K8sSchema):
    node_names: list[str] | None = Field(default=None, alias="NodeNames")
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict, alias="FailedAndUnresolvableNodes"
    )
    error: str = Field(default="", alias="Error")


class HostPriority(K8sSchema):
    host: str = Field(alias="Host")
    score: int = Field(alias="Score", ge=0, le=10)


class ExtenderBindingArgs(K8sSchema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"PodName": "trainer", "PodNamespace": "ml", "PodUID": "0b5e7c1a-1", "Node": "n1"}
            ]
        }
    )

    pod_name: str = Field(alias="PodName", max_length=253)
    pod_namespace: str = Field(alias="PodNamespace", max_length=253)
    pod_uid: str = Field(alias="PodUID", max_length=128)
    node: str = Field(alias="Node", max_length=253)


class ExtenderBindingResult(K8sSchema):
    error: str = Field(default="", alias="Error")
