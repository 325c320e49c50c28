"""kube/budget.ByteBudget: what bounds the operator's memory while it writes jobs with large payloads (issue 28)."""

from __future__ import annotations

import asyncio
import random

import pytest

from sextant.kube.budget import ByteBudget


async def _run(budget: ByteBudget, weights: list[int]) -> tuple[int, list[int]]:
    """Hold each weight for a few loop turns, all at once; the most bytes ever in flight, and the order they ran."""
    most, order = 0, []

    async def one(i: int, weight: int) -> None:
        nonlocal most
        async with budget.hold(weight):
            order.append(i)
            most = max(most, budget.in_flight)
            for _ in range(random.randint(1, 4)):
                await asyncio.sleep(0)

    await asyncio.gather(*(one(i, w) for i, w in enumerate(weights)))
    return most, order


@pytest.mark.parametrize("seed", range(20))
def test_never_more_bytes_in_flight_than_the_capacity_and_every_write_runs(seed: int) -> None:
    random.seed(seed)
    weights = [random.choice([0, 1, 300, 70_000, 262_144]) for _ in range(40)]
    budget = ByteBudget(1_000_000)
    most, order = asyncio.run(_run(budget, weights))
    assert most <= 1_000_000
    assert sorted(order) == list(range(len(weights)))
    assert budget.in_flight == 0


def test_small_writes_do_not_wait_for_each_other() -> None:
    budget = ByteBudget(100)

    async def main() -> int:
        held = 0
        entered = asyncio.Event()
        release = asyncio.Event()

        async def one() -> None:
            nonlocal held
            async with budget.hold(0):
                held += 1
                if held == 64:
                    entered.set()
                await release.wait()

        tasks = [asyncio.create_task(one()) for _ in range(64)]
        await asyncio.wait_for(entered.wait(), 5)
        release.set()
        await asyncio.gather(*tasks)
        return held

    assert asyncio.run(main()) == 64


def test_a_write_heavier_than_the_whole_budget_runs_alone_rather_than_never() -> None:
    budget = ByteBudget(100)
    most, order = asyncio.run(_run(budget, [60, 500, 60]))
    assert most <= 100 and sorted(order) == [0, 1, 2]


def test_the_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be positive"):
        ByteBudget(0)
