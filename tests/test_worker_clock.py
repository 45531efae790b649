"""The task's one execution clock (``controlscope.worker.ExecutionClock``; paper section 4)."""

from __future__ import annotations

import time

import pytest

from controlscope.worker import ExecutionClock, Limits


def test_charges_count_for_the_task_and_the_running_block() -> None:
    clock = ExecutionClock(block_s=10, task_s=25, cancel_grace_s=1)
    clock.start_block()
    clock.charge(4)
    assert (clock.task_s, clock.block_s) == (4, 4)
    assert clock.remaining() == (6, "block")
    clock.start_block()  # the next block: its count restarts, the task's goes on
    clock.charge(3)
    assert (clock.task_s, clock.block_s) == (7, 3)
    assert clock.remaining() == (7, "block")
    clock.charge(12)
    assert clock.remaining() == (-5, "block")  # overrun: negative, the block's budget binds


def test_the_task_budget_binds_when_it_is_the_smaller() -> None:
    clock = ExecutionClock(block_s=10, task_s=12, cancel_grace_s=1)
    clock.start_block()
    clock.charge(8)
    clock.start_block()
    clock.charge(1)
    assert clock.remaining() == (3, "task")
    assert not clock.task_spent
    clock.charge(3)
    assert clock.task_spent


def test_cancellation_grace_counts_from_the_cancellation() -> None:
    clock = ExecutionClock(block_s=10, task_s=100, cancel_grace_s=2)
    clock.start_block()
    clock.charge(5)
    assert not clock.cancelling
    clock.start_cancel()
    clock.start_cancel()  # idempotent: the grace does not restart
    assert clock.cancelling and clock.remaining() == (2, "cancel")
    clock.charge(0.5)
    assert clock.remaining() == (1.5, "cancel") and clock.block_s == 5.5
    clock.start_block()  # the replacement's block is not cancelling
    assert not clock.cancelling and clock.remaining() == (10, "block")


def test_running_charges_the_body_even_when_it_raises() -> None:
    clock = ExecutionClock(block_s=10, task_s=10, cancel_grace_s=1)
    with pytest.raises(RuntimeError), clock.running():
        time.sleep(0.02)
        raise RuntimeError("x")
    assert 0.02 <= clock.task_s < 1 and clock.block_s == clock.task_s


def test_from_limits_takes_the_three_execution_budgets() -> None:
    clock = ExecutionClock.from_limits(Limits(block_exec_s=3, task_exec_s=9, cancel_grace_s=0.5))
    assert (clock.block_budget_s, clock.task_budget_s, clock.cancel_grace_s) == (3, 9, 0.5)


def test_limits_refuse_the_old_wall_names() -> None:
    with pytest.raises(ValueError, match="block_wall_s"):
        Limits(block_wall_s=3)  # type: ignore[call-arg]
