"""Handler: how the code that does the work runs — a pod per attempt, or on workers."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .common import Model, validations

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


class WorkerHandler(Model):
    """Served by `sextant worker` processes (docs/workers.md) instead of a pod per attempt."""

    command: list[str] | None = Field(
        default=None,
        min_length=1,
        description="A command the worker starts per job, the payload (JSON) on standard input and the SEXTANT_* "
        "variables in its environment. Unset: an SDK function registered under the Handler's name.",
    )


class HandlerSpec(Model):
    template: PodTemplate | None = Field(
        default=None, description="Pod mode: the pod template each attempt runs from (`sextant run` inside it)."
    )
    worker: WorkerHandler | None = Field(
        default=None,
        description="Worker mode: the handler is served by `sextant worker` processes (docs/workers.md); "
        "exactly one of template and worker.",
    )
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

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {
                "rule": "has(self.template) != has(self.worker)",
                "message": "set exactly one of template (a pod per attempt) and worker (served by sextant worker)",
            }
        )
    }

    @property
    def on_workers(self) -> bool:
        return self.worker is not None

    @model_validator(mode="after")
    def _template_shape(self) -> HandlerSpec:
        if self.template is None:
            return self
        problems = template_problems(self.pod_spec())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def pod_spec(self) -> dict[str, Any]:
        if self.template is None:
            raise ValueError("a worker-mode handler has no pod template")
        return self.template.spec.model_dump(by_alias=True, exclude_none=True, mode="json")


def template_problems(spec: dict[str, Any]) -> list[str]:
    """The pod spec's fields the operator itself writes into (env, security contexts, os), checked for shape: the
    CRD keeps the rest of the pod spec open, and the API server checks it when the pod is created."""
    out: list[str] = []

    def dict_or_absent(value: Any, where: str) -> bool:
        if value is not None and not isinstance(value, dict):
            out.append(f"{where} must be an object")
            return False
        return True

    dict_or_absent(spec.get("os"), "template.spec.os")
    dict_or_absent(spec.get("securityContext"), "template.spec.securityContext")
    containers = [("containers", i, c) for i, c in enumerate(spec.get("containers") or [])]
    init = spec.get("initContainers")
    if init is not None and not isinstance(init, list):
        out.append("template.spec.initContainers must be a list")
    else:
        containers += [("initContainers", i, c) for i, c in enumerate(init or [])]
    for group, i, container in containers:
        where = f"template.spec.{group}[{i}]"
        if not isinstance(container, dict):
            out.append(f"{where} must be an object")
            continue
        env = container.get("env")
        if env is not None and (not isinstance(env, list) or
                                not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in env)):
            out.append(f"{where}.env must be a list of objects with a name")
        context = container.get("securityContext")
        if dict_or_absent(context, f"{where}.securityContext") and context:
            capabilities = context.get("capabilities")
            if dict_or_absent(capabilities, f"{where}.securityContext.capabilities") and capabilities:
                for key in ("add", "drop"):
                    value = capabilities.get(key)
                    if value is not None and (not isinstance(value, list) or
                                              not all(isinstance(v, str) for v in value)):
                        out.append(f"{where}.securityContext.capabilities.{key} must be a list of strings")
        policy = container.get("terminationMessagePolicy")
        if policy is not None and not isinstance(policy, str):
            out.append(f"{where}.terminationMessagePolicy must be a string")
    return out


class Handler(Model):
    spec: HandlerSpec
