"""Handler: how the code that does the work runs — a pod template (core-concepts: Handlers)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import Model

KIND = "Handler"
PLURAL = "handlers"
SHORT_NAMES = ["shandler"]


class TemplateMetadata(Model):
    labels: dict[str, str] = Field(default_factory=dict, description="Labels added to every attempt pod.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations added to every attempt pod.")


class Container(Model):
    """A container of the pod template; the first one runs the handler. Every core/v1 Container field is allowed."""

    name: str = Field(min_length=1, description="The container's name.")
    image: str = Field(min_length=1, description="The image (ignored by the local node, which runs the command).")

    model_config = Model.model_config | {"extra": "allow", "json_schema_extra": {"x-kubernetes-preserve-unknown-fields": True}}


class PodSpec(Model):
    """A core/v1 PodSpec; only the containers are checked here, the API server checks the rest at pod creation."""

    containers: list[Container] = Field(min_length=1, description="The first container runs the handler.")

    model_config = Model.model_config | {"extra": "allow", "json_schema_extra": {"x-kubernetes-preserve-unknown-fields": True}}


class PodTemplate(Model):
    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata, description="Labels and annotations.")
    spec: PodSpec = Field(description="The pod spec, as in a batch/v1 Job's template.")


class HandlerSpec(Model):
    template: PodTemplate = Field(description="The pod template each attempt runs from.")
    heartbeat: bool = Field(
        default=True,
        description="The handler runs `sextant run`, which renews the attempt's lease. The lease clock starts "
        "when the container starts; an attempt whose lease is not renewed for leaseDuration fails with "
        "LeaseExpired. Set false for an image without the runner: then only the timeout stops a hung attempt.",
    )
    non_retryable_exit_codes: list[int] = Field(
        default_factory=list,
        description="Exit codes that end the job dead at once instead of retrying.",
        json_schema_extra={"items": {"type": "integer", "minimum": 1, "maximum": 255}},
    )

    def pod_spec(self) -> dict[str, Any]:
        return self.template.spec.model_dump(by_alias=True, exclude_none=True, mode="json")


class Handler(Model):
    spec: HandlerSpec
