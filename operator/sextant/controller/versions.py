"""Ordering a store's copies of an object by resourceVersion."""

from __future__ import annotations

from collections import OrderedDict

from ..kube.informer import Key


class Versions:
    """The newest resourceVersion seen per object, so an older copy never replaces a newer one.

    For the few kinds whose store also takes the answers of the operator's own writes (Workers, Schedules): those
    answers and the watch race each other. A deleted object is remembered for a while (tombstones: such objects are
    few) so that a late answer cannot bring it back. resourceVersions are etcd revisions; a relist or an object
    without one (0) is always taken.
    """

    TOMBSTONES = 1000

    def __init__(self) -> None:
        self._live: dict[Key, int] = {}
        self._gone: OrderedDict[Key, int] = OrderedDict()

    def newer(self, key: Key, rv: int) -> bool:
        if rv and rv < max(self._live.get(key, 0), self._gone.get(key, 0)):
            return False
        if rv and key in self._gone and rv > self._gone[key]:
            del self._gone[key]  # created again under the same name
        self._live[key] = max(rv, self._live.get(key, 0))
        return True

    def forget(self, key: Key, rv: int) -> None:
        last = max(rv, self._live.pop(key, 0))
        if last:
            self._gone[key] = last
            self._gone.move_to_end(key)
            while len(self._gone) > self.TOMBSTONES:
                self._gone.popitem(last=False)
