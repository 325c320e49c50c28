"""List, then watch from the list's resourceVersion; on a gap, list again. One per kind Sextant owns.

It keeps no objects itself: each change goes to the view's callback, already trimmed. `synced` is set once
the first list has been delivered, so the controller decides nothing before it knows the whole cluster. A relist
delivers only what changed, and a delete for what is gone: by the versions the informer remembers, or those the
callback's store holds (`known`: then the informer remembers nothing per object, as client-go's Reflector diffs
against its Indexer).

Nothing stops it but cancellation:
- per object: a callback that raises (any exception) is logged with the object's key, counted, reported
  through `on_error` (a Warning Event on the object), and given the object again after a per-key backoff
  (1 s doubling to 5 min) unless a newer version or its delete arrives first; the other objects, the list and
  the watch go on;
- per connection: any error of the list or the watch (a restarted or unreachable API server, a stream cut
  mid-chunk, a reset, a malformed line, 429/5xx) makes it unhealthy (readiness drops) and it tries again after
  a backoff with jitter (0.2 s doubling to 2 s): the watch resumes from the last resourceVersion it saw (no event
  is lost in between), and a 410 Gone or a failed list lists again. It is healthy again as soon as a list
  completes or a watch is open.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import metrics
from .client import Gone, Kube
from .workqueue import Backoff, describe

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
OnChange = Callable[[str, dict[str, Any]], None]  # ("upsert" | "delete", object)
OnError = Callable[[dict[str, Any], str], None]  # (the object, what went wrong)
Known = Callable[[], Mapping[Key, str]]  # the resourceVersion the callback's store holds of each object

RETRY_INITIAL = 0.2  # seconds before the first retry of a failed list or watch
RETRY_MAX = 2.0  # the longest wait between retries (× 0.5–1.5 jitter): ready within seconds of a comeback
RELIST_FLOOR = 1.0  # a 410 this soon after a list waits its backoff instead of listing again at once
# Items per list page at most. Each page is a fresh read at the list's revision, so the API server's cost grows with
# the number of pages: 100k jobs listed alone took 15-23 s and 17-39 API-server CPU-s in pages of 500, and 11 s and
# 9 CPU-s in pages of 5000 (a page of jobs is then ~15 MB of JSON, digested one at a time).
LIST_PAGE = 5000
# JSON per list page, about (Kube.pages sizes each page by the one before; one over 3 times this is asked for again
# smaller). Parsed, JSON weighs up to ~11 times as much (a job whose legal 256 KiB payload is small keys: ~2.9 MiB),
# so 5000 such jobs in one page would be ~14 GB; at 8 MiB a page holds ~30 of them (~90 MB while it is
# digested, each freed once the view took its lean copy) and ~3000 jobs without a payload.
LIST_PAGE_BYTES = 8 * 1024 * 1024


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, where the C library is glibc (None elsewhere: musl, macOS)."""
    try:
        trim_ = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim_.argtypes, trim_.restype = [ctypes.c_size_t], ctypes.c_int
    return trim_


_TRIM = _malloc_trim()


def give_back_memory() -> None:
    """Return the C heap's free pages to the OS (glibc's public malloc_trim(0)). A list of 100k jobs passes ~100 MB
    of JSON and parsed pages through the heap; freed, glibc keeps those pages (its trim threshold only ever returns
    the heap's top, and the view's records sit above them), so the operator would carry its start-up peak for life."""
    if _TRIM is not None:
        _TRIM(0)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    """obj without what the operator never reads: managedFields (often half an object's size, and for a job a list
    of every key of its payload) and kubectl's last-applied copy. A shallow copy when there is something to drop
    (obj itself is not changed: an API answer's caller may still hand it on), else obj."""
    meta = obj.get("metadata")
    if not meta:
        return obj
    annotations = meta.get("annotations") or {}
    if "managedFields" not in meta and _LAST_APPLIED not in annotations:
        return obj
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if _LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    return {**obj, "metadata": meta}


def jittered(delay: float) -> float:
    """delay spread over ×0.5–1.5, so that informers (and replicas) do not retry in lockstep."""
    return delay * (0.5 + random.random())


class Informer:
    def __init__(self, kube: Kube, path: str, on_change: OnChange, *, label_selector: str | None = None,
                 field_selector: str | None = None, name: str | None = None, on_error: OnError | None = None,
                 on_reconnect: Callable[[], None] | None = None, on_failure: Callable[[Exception], None] | None = None,
                 backoff: Backoff | None = None, page_bytes: int | None = LIST_PAGE_BYTES,
                 known: Known | None = None) -> None:
        self.kube = kube
        self.page_bytes = page_bytes
        self.path = path
        self.on_change = on_change
        self.on_error = on_error
        self.on_reconnect = on_reconnect  # called when it is healthy again after a connection failure
        self.on_failure = on_failure  # called with what broke a list or watch (it is tried again all the same)
        self.params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        self.name = name or path
        self.synced = asyncio.Event()
        self.healthy = False
        self.resource_version: str | None = None  # where the watch resumes; None: list first
        self._versions: dict[Key, str] = {}  # the versions delivered, unless the store says (`known`)
        self._known = known
        self._backoff = backoff if backoff is not None else Backoff()  # per object whose callback failed
        self._retry: dict[Key, tuple[str, dict[str, Any]]] = {}  # the latest change of such an object
        self._retry_timers: dict[Key, asyncio.TimerHandle] = {}
        self.connection_errors = 0
        self._progress = False  # the current watch delivered something

    # --- connection -----------------------------------------------------------------------------------------
    async def run(self) -> None:
        delay = RETRY_INITIAL
        listed_at = 0.0
        while True:
            try:
                if self.resource_version is None:
                    listed_at = time.monotonic()
                    await self._relist()
                if await self._watch():
                    delay = RETRY_INITIAL  # the connection carried events or ran its course: it is sound again
                    continue
                wait = jittered(delay)  # ended at once without a word (a proxy?): do not ask again in a hot loop
            except asyncio.CancelledError:
                raise
            except Gone:
                self.resource_version = None
                if time.monotonic() - listed_at >= RELIST_FLOOR:
                    log.info("%s: watch expired, listing again", self.name)
                    continue
                self.healthy = False
                wait = jittered(delay)
                log.warning("%s: watch expired right after a list; listing again in %.1fs", self.name, wait)
            except Exception as exc:  # noqa: BLE001 - whatever ends a list or watch, the informer goes on
                self.healthy = False
                self.connection_errors += 1
                if self._progress:  # it broke after carrying events: a cut, not a server that is away
                    delay, self._progress = RETRY_INITIAL, False
                wait = jittered(delay)
                again = "listing again" if self.resource_version is None else "resuming the watch"
                log.warning("%s: %s; %s in %.1fs", self.name, describe(exc, 300), again, wait)
                self._hook(self.on_failure, exc)
            await asyncio.sleep(wait)
            delay = min(delay * 2, RETRY_MAX)

    def _opened(self) -> None:
        self._progress = False
        self._set_healthy()

    def _set_healthy(self) -> None:
        again = not self.healthy and self.synced.is_set()
        self.healthy = True
        if again:
            self._hook(self.on_reconnect)

    def _hook(self, hook: Callable[..., None] | None, *args: Any) -> None:
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:  # noqa: BLE001 - a hook must not break the connection handling
            log.exception("%s: %s hook failed", self.name, getattr(hook, "__name__", "a"))

    async def _relist(self) -> None:
        versions: dict[Key, str] = {}  # of what was listed: remembered unless the store says (`known`)
        seen: set[Key] = set()
        known = self._known() if self._known is not None else self._versions
        resource_version = ""
        async for items, version in self.kube.pages(self.path, self.params, LIST_PAGE, self.page_bytes):
            items.reverse()
            while items:  # each object dropped once digested: the callback keeps what it needs (the view, no payload)
                self._listed(items.pop(), known, versions if self._known is None else None, seen)
            resource_version = version or resource_version
        for key in [key for key in known.keys() if key not in seen]:
            namespace, name = key
            self._deliver("delete", {"metadata": {"namespace": namespace, "name": name}}, key)
        self._versions = versions
        self.resource_version = resource_version
        give_back_memory()
        self._set_healthy()
        self.synced.set()

    def _listed(self, obj: dict[str, Any], known: Mapping[Key, str], versions: dict[Key, str] | None,
                seen: set[Key]) -> None:
        key = self._key(obj)
        if key is None:
            return
        seen.add(key)
        version = _version_of(obj)
        if versions is not None:
            versions[key] = version
        if known.get(key) != version:
            self._deliver("upsert", trim(obj), key)

    async def _watch(self) -> bool:
        """Watch from self.resource_version until the server ends the watch; True when it delivered anything or
        ran its course (False: it ended empty-handed early, e.g. an empty 200 from a proxy)."""
        assert self.resource_version is not None
        started = time.monotonic()
        delivered = False
        async for event_type, obj in self.kube.watch(self.path, self.resource_version, self.params,
                                                     opened=self._opened):
            version = _version_of(obj)
            if version:
                self.resource_version = version
            delivered = self._progress = True
            if event_type == "BOOKMARK":
                continue
            key = self._key(obj)
            if key is None:
                continue
            if event_type == "DELETED":
                self._versions.pop(key, None)
                self._deliver("delete", trim(obj), key)
            else:
                if self._known is None:
                    self._versions[key] = version
                self._deliver("upsert", trim(obj), key)
        return delivered or time.monotonic() - started > 30

    # --- per object -----------------------------------------------------------------------------------------
    def _key(self, obj: dict[str, Any]) -> Key | None:
        try:
            key = key_of(obj)
            if isinstance(key[0], str) and isinstance(key[1], str):
                return key
        except (KeyError, TypeError, AttributeError):
            pass
        metrics.OBJECT_ERRORS.labels(self.name, "digest").inc()
        log.error("%s: skipping an object without a name: %.200r", self.name, obj)
        return None

    def _deliver(self, kind: str, obj: dict[str, Any], key: Key) -> None:
        """Hand one change to the callback; if it raises, keep the change and hand it over again after a backoff."""
        timer = self._retry_timers.pop(key, None)
        if timer is not None:
            timer.cancel()  # this change supersedes the one waiting for its retry
        self._retry.pop(key, None)
        try:
            self.on_change(kind, obj)
        except Exception as exc:  # noqa: BLE001 - one object must not stop the informer
            self._failed(kind, obj, key, exc)
            return
        self._backoff.forget(key)

    def _failed(self, kind: str, obj: dict[str, Any], key: Key, exc: Exception) -> None:
        first = self._backoff.failures(key) == 0
        delay = self._backoff.when(key)
        metrics.OBJECT_ERRORS.labels(self.name, "digest").inc()
        message = describe(exc)
        if first:
            # A ValueError is an object the models refuse (its message names the field): no traceback needed.
            log.log(logging.WARNING if isinstance(exc, ValueError) else logging.ERROR,
                    "%s %s/%s: cannot take it in: %s; trying again in %.0f s, then less often", self.name, *key,
                    message, delay, exc_info=None if isinstance(exc, ValueError) else exc)
            if self.on_error is not None and kind == "upsert":
                try:
                    self.on_error(obj, f"the operator cannot take this {self.name} in: {message}")
                except Exception:  # noqa: BLE001 - reporting must not fail the informer
                    log.debug("%s: could not report the failure of %s", self.name, key, exc_info=True)
        else:
            log.debug("%s %s/%s: cannot take it in (%s); trying again in %.0f s", self.name, *key, message, delay)
        self._retry[key] = (kind, obj)
        self._retry_timers[key] = asyncio.get_running_loop().call_later(delay, self._redeliver, key)

    def _redeliver(self, key: Key) -> None:
        self._retry_timers.pop(key, None)
        pending = self._retry.pop(key, None)
        if pending is not None:
            self._deliver(pending[0], pending[1], key)


def _version_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    version = meta.get("resourceVersion", "") if isinstance(meta, dict) else ""
    return version if isinstance(version, str) else ""
