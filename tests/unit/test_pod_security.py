"""Attempt pods meet the Pod Security Standard "restricted" by default; whatever a Handler's template sets wins.

The same pods are admitted by a real API server in a namespace enforcing "restricted" in
tests/cluster/test_pod_security.py.
"""

from __future__ import annotations

import copy
from typing import Any

from sextant.controller.pods import build_pod
from sextant.lifecycle.transitions import CreatePod
from sextant.resources.handler import HandlerSpec

from _builders import queue, snapshot

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def handler_with(spec: dict[str, Any] | None = None, **containers: dict[str, Any]) -> HandlerSpec:
    """A Handler whose template has the container `handler` (plus fields) and pod spec fields `spec`."""
    main = {"name": "handler", "image": "registry.example/h:1", **containers.get("handler", {})}
    return HandlerSpec.model_validate({"template": {"spec": {"containers": [main], **(spec or {})}}})


def pod_of(handler: HandlerSpec) -> dict[str, Any]:
    raw = {"metadata": {"name": "job-8f3k2m9q", "namespace": "shop"}}
    return build_pod(raw, snapshot(), handler, queue(), CreatePod("job-8f3k2m9q-1", 1, 1))


def test_a_plain_template_gets_the_restricted_pod_and_container_settings():
    pod = pod_of(handler_with())
    assert pod["spec"]["securityContext"] == RESTRICTED_POD
    assert pod["spec"]["containers"][0]["securityContext"] == RESTRICTED_CONTAINER


def test_every_container_and_init_container_is_restricted():
    extra = {
        "initContainers": [{"name": "migrate", "image": "registry.example/m:1"}],
        "containers": [{"name": "handler", "image": "registry.example/h:1"},
                       {"name": "sidecar", "image": "registry.example/s:1"}],
    }
    pod = pod_of(HandlerSpec.model_validate({"template": {"spec": extra}}))
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert container["securityContext"] == RESTRICTED_CONTAINER, container["name"]


def test_the_templates_pod_settings_win_field_by_field():
    pod = pod_of(handler_with({"securityContext": {"runAsNonRoot": False, "runAsUser": 0, "fsGroup": 2000}}))
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": False, "runAsUser": 0, "fsGroup": 2000,  # the template's, untouched
        "seccompProfile": {"type": "RuntimeDefault"},  # the default of what it left unset
    }  # fmt: skip
    pod = pod_of(handler_with({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}))
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "Unconfined"}}


def test_the_templates_container_settings_win_field_by_field():
    sc = {"allowPrivilegeEscalation": True, "readOnlyRootFilesystem": True, "runAsUser": 1000}
    pod = pod_of(handler_with(handler={"securityContext": sc}))
    assert pod["spec"]["containers"][0]["securityContext"] == {**sc, "capabilities": {"drop": ["ALL"]}}
    # A container-level runAsNonRoot/seccompProfile is the template's business: none is added there, so a pod-level
    # override in the template is not undone per container.
    assert "runAsNonRoot" not in pod["spec"]["containers"][0]["securityContext"]


def test_added_capabilities_keep_working_on_top_of_drop_all():
    pod = pod_of(handler_with(handler={"securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}))
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}, "allowPrivilegeEscalation": False,
    }  # fmt: skip
    pod = pod_of(handler_with(handler={"securityContext": {"capabilities": {"drop": []}}}))
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": []}


def test_privileged_or_sys_admin_containers_keep_privilege_escalation():
    """allowPrivilegeEscalation=false with privileged or CAP_SYS_ADMIN is refused by the API server's validation."""
    for sc in ({"privileged": True}, {"capabilities": {"add": ["SYS_ADMIN"]}},
               {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}):
        pod = pod_of(handler_with(handler={"securityContext": copy.deepcopy(sc)}))
        assert "allowPrivilegeEscalation" not in pod["spec"]["containers"][0]["securityContext"], sc


def test_windows_pods_are_left_alone():
    pod = pod_of(handler_with({"os": {"name": "windows"}}))
    assert "securityContext" not in pod["spec"]
    assert "securityContext" not in pod["spec"]["containers"][0]


def test_the_handler_itself_is_not_changed():
    handler = handler_with()
    before = handler.model_dump()
    pod_of(handler)
    pod_of(handler)
    assert handler.model_dump() == before
