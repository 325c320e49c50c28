"""The count cap on finished jobs kept as objects (lifecycle/retention.py over_cap): which go, oldest first."""

from __future__ import annotations

import itertools
import random

import pytest

from sextant.lifecycle.retention import MAX_FINISHED_JOBS, over_cap


def walk(jobs: list[tuple[str, str]]):
    """jobs are given oldest first already: (name, queue)."""
    return iter(jobs)


def counts_of(jobs):
    out: dict[str, int] = {}
    for _, q in jobs:
        out[q] = out.get(q, 0) + 1
    return out


JOBS = [("a1", "a"), ("b1", "b"), ("a2", "a"), ("b2", "b"), ("a3", "a"), ("c1", "c")]


@pytest.mark.parametrize("caps, cluster_cap, limit, expected", [
    ({}, None, 100, []),                                   # no cap at all: nothing goes
    ({}, 6, 100, []),                                      # exactly at the cap: nothing goes
    ({}, 5, 100, ["a1"]),                                  # one over: the oldest goes
    ({}, 3, 100, ["a1", "b1", "a2"]),                      # three over: the three oldest, whatever their queue
    ({}, 0, 100, [n for n, _ in JOBS]),                    # a cap of 0: every finished job goes
    ({}, 0, 2, ["a1", "b1"]),                              # never more than the limit in one pass
    ({}, 3, 0, []),                                        # a limit of 0: nothing
    ({"a": 1}, None, 100, ["a1", "a2"]),                   # a queue's cap: its oldest, not the other queues'
    ({"a": 3}, None, 100, []),                             # a queue at its cap
    ({"a": None, "b": None}, None, 100, []),               # None is no cap
    ({"b": 0}, None, 100, ["b1", "b2"]),                   # a queue's cap of 0
    ({"a": 2}, 4, 100, ["a1", "b1"]),                      # both: a1 serves both; then the cluster takes b1
    ({"a": 1}, 5, 100, ["a1", "a2"]),                      # the queue's excess exceeds the cluster's
    ({"c": 0}, 5, 100, ["a1", "c1"]),                      # c1 is the newest, but its queue keeps none
    ({"a": 1, "b": 1}, None, 3, ["a1", "b1", "a2"]),       # the limit cuts across queues, oldest first
])
def test_over_cap(caps, cluster_cap, limit, expected):
    chosen = over_cap(walk(JOBS), counts_of(JOBS), caps, cluster_cap, limit)
    assert [k for k, _ in chosen] == expected
    assert all(q == dict(JOBS)[k] for k, q in chosen)


def test_the_walk_stops_once_nothing_is_over():
    seen = []

    def oldest():
        for job in JOBS:
            seen.append(job[0])
            yield job

    over_cap(oldest(), counts_of(JOBS), {}, 4, 100)
    assert seen == ["a1", "b1", "a2"]  # two over: it reads the two it deletes and the next, no further


def test_the_default_cluster_cap_is_a_positive_number():
    assert MAX_FINISHED_JOBS > 0


@pytest.mark.parametrize("seed", range(200))
def test_exhaustively_after_a_pass_no_cap_is_passed_and_only_the_oldest_went(seed):
    """Random queues, caps and limits: what stays is within every cap (when the limit allowed it), each queue loses
    its oldest jobs only, and no job of a queue within its cap goes while the cluster is within its own."""
    rng = random.Random(seed)
    queues = ["q0", "q1", "q2"][: rng.randint(1, 3)]
    jobs = [(f"j{i}", rng.choice(queues)) for i in range(rng.randint(0, 30))]
    caps = {q: rng.choice([None, 0, 1, 3, 10]) for q in queues}
    cluster_cap = rng.choice([None, 0, 5, 15, 40])
    limit = rng.choice([1, 5, 1000])
    counts = counts_of(jobs)
    chosen = over_cap(iter(jobs), counts, caps, cluster_cap, limit)
    names = [k for k, _ in chosen]
    assert len(names) <= limit and len(set(names)) == len(names)
    left = [j for j in jobs if j[0] not in names]
    # each queue loses a prefix of its own jobs (oldest first)
    for q in queues:
        own = [n for n, jq in jobs if jq == q]
        gone = [n for n in names if dict(jobs)[n] == q]
        assert own[:len(gone)] == gone
    # the chosen are in global age order
    order = {n: i for i, (n, _) in enumerate(jobs)}
    assert names == sorted(names, key=order.__getitem__)
    if len(names) < limit:  # not cut short: every cap holds afterwards
        after = counts_of(left)
        for q in queues:
            if caps[q] is not None:
                assert after.get(q, 0) <= caps[q]
        if cluster_cap is not None:
            assert len(left) <= cluster_cap
        # and nothing went that no cap asked for: the minimum number
        need_q = sum(max(0, counts.get(q, 0) - c) for q, c in caps.items() if c is not None)
        need_c = max(0, len(jobs) - cluster_cap) if cluster_cap is not None else 0
        assert len(names) <= need_q + need_c and len(names) >= max(need_q, need_c)


def test_every_small_case_by_brute_force():
    """All assignments of 5 jobs to 2 queues, every cap from None to 5: the result is the greedy oldest-first one."""
    for queues in itertools.product("ab", repeat=5):
        jobs = [(f"j{i}", q) for i, q in enumerate(queues)]
        for ca, cb, cc in itertools.product([None, 0, 1, 2, 5], repeat=3):
            caps = {"a": ca, "b": cb}
            chosen = [k for k, _ in over_cap(iter(jobs), counts_of(jobs), caps, cc, 100)]
            # brute force: walk oldest first, take a job if a cap is passed by the jobs still kept
            kept = list(jobs)
            expect = []
            for name, q in jobs:
                n_q = sum(1 for _, x in kept if x == q)
                if (caps[q] is not None and n_q > caps[q]) or (cc is not None and len(kept) > cc):
                    expect.append(name)
                    kept.remove((name, q))
            assert chosen == expect, (queues, caps, cc)
