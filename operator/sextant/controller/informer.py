"""List, then watch from the list's resourceVersion; on a gap, list again. One per kind Sextant owns.

It keeps no objects itself: each change goes to the view's callback, already trimmed. `synced` is set once
the first list has been delivered, so the controller decides nothing before it knows the whole cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..kube import ApiError, Gone, Kube

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
OnChange = Callable[[str, dict[str, Any]], None]  # ("upsert" | "delete", object)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop what the operator never reads (managedFields is often half an object's size)."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if annotations:
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


class Informer:
    def __init__(self, kube: Kube, path: str, on_change: OnChange, *, label_selector: str | None = None,
                 field_selector: str | None = None, name: str | None = None) -> None:
        self.kube = kube
        self.path = path
        self.on_change = on_change
        self.params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        self.name = name or path
        self.synced = asyncio.Event()
        self.healthy = False
        self._versions: dict[Key, str] = {}

    async def run(self) -> None:
        delay = 0.2
        while True:
            try:
                resource_version = await self._relist()
                delay = 0.2
                while True:
                    resource_version = await self._watch(resource_version)
            except Gone:
                log.info("%s: watch expired, listing again", self.name)
            except asyncio.CancelledError:
                raise
            except (ApiError, OSError, ValueError) as exc:
                self.healthy = False
                log.warning("%s: %s; listing again in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _relist(self) -> str:
        seen: dict[Key, str] = {}
        resource_version = ""
        async for items, version in self.kube.pages(self.path, self.params):
            for obj in items:
                key = key_of(obj)
                seen[key] = obj["metadata"].get("resourceVersion", "")
                if self._versions.get(key) != seen[key]:
                    self.on_change("upsert", trim(obj))
            resource_version = version or resource_version
        for key in self._versions.keys() - seen.keys():
            namespace, name = key
            self.on_change("delete", {"metadata": {"namespace": namespace, "name": name}})
        self._versions = seen
        self.healthy = True
        self.synced.set()
        return resource_version

    async def _watch(self, resource_version: str) -> str:
        async for event_type, obj in self.kube.watch(self.path, resource_version, self.params):
            resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
            if event_type == "BOOKMARK":
                continue
            key = key_of(obj)
            if event_type == "DELETED":
                self._versions.pop(key, None)
                self.on_change("delete", trim(obj))
            else:
                self._versions[key] = resource_version
                self.on_change("upsert", trim(obj))
        return resource_version
