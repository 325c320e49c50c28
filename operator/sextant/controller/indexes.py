"""The view's indexes of jobs, each declared once by what it files a record under (client-go's Indexers): the store
keeps them all up to date as records come and go, instead of a hand-kept map per index."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from ..kube.informer import Key

R = TypeVar("R")


class Index(Generic[R]):
    """index key → the job keys filed under it (a record may be filed under none, or several)."""

    def __init__(self, file: Callable[[Key, R], Iterable[Hashable]]) -> None:
        self.file = file
        self.members: dict[Any, set[Key]] = {}

    def add(self, key: Key, record: R) -> None:
        for at in self.file(key, record):
            self.members.setdefault(at, set()).add(key)

    def remove(self, key: Key, record: R) -> None:
        for at in self.file(key, record):
            members = self.members.get(at)
            if members is not None:
                members.discard(key)
                if not members:
                    del self.members[at]


class Tally(Generic[R]):
    """index key → how many records of each kind it holds (counted, not listed: for 100k finished jobs)."""

    def __init__(self, count: Callable[[Key, R], tuple[Hashable, str] | None]) -> None:
        self.count = count
        self.members: dict[Any, Counter[str]] = {}

    def add(self, key: Key, record: R) -> None:
        self._step(key, record, +1)

    def remove(self, key: Key, record: R) -> None:
        self._step(key, record, -1)

    def _step(self, key: Key, record: R, step: int) -> None:
        at = self.count(key, record)
        if at is None:
            return
        counts = self.members.setdefault(at[0], Counter())
        counts[at[1]] += step
        if counts[at[1]] <= 0:
            del counts[at[1]]
            if not counts:
                del self.members[at[0]]


class Indexes(Generic[R]):
    """The registry: every index of the store, fed as one."""

    def __init__(self, **indexes: Index[R] | Tally[R]) -> None:
        self.all = indexes

    def __getitem__(self, name: str) -> dict[Any, Any]:
        return self.all[name].members

    def add(self, key: Key, record: R) -> None:
        for index in self.all.values():
            index.add(key, record)

    def remove(self, key: Key, record: R) -> None:
        for index in self.all.values():
            index.remove(key, record)
