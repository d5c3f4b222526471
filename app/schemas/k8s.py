"""kube-scheduler extender wire format (PascalCase JSON), as kube-scheduler sends and expects it.

Only the parts Kairos reads are typed; everything else in a Pod or Node is accepted and ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class K8sSchema(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


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

    pod: dict[str, Any] = Field(alias="Pod")
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
