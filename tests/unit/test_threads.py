"""analysis.threads: results in order, the caller's torch thread count restored, errors raised."""

from __future__ import annotations

import threading

import pytest
import torch

from headwatch.analysis.threads import map_per_core


@pytest.fixture
def three_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(before)


def test_results_in_order_on_several_threads_each_with_one_torch_thread(three_threads) -> None:
    seen: dict[int, tuple[int, int]] = {}

    def task(i: int) -> int:
        seen[i] = (threading.get_ident(), torch.get_num_threads())
        return i * i

    assert map_per_core(task, range(12)) == [i * i for i in range(12)]
    assert {t for _, t in seen.values()} == {1}  # one torch thread inside a task
    assert threading.get_ident() not in {ident for ident, _ in seen.values()}  # on pool threads
    assert torch.get_num_threads() == 3


def test_nested_calls_run_in_order_on_the_task_thread(three_threads) -> None:
    def inner(i: int) -> int:
        return threading.get_ident()

    def outer(i: int) -> set[int]:
        return set(map_per_core(inner, range(4))) | {threading.get_ident()}

    for idents in map_per_core(outer, range(3)):
        assert len(idents) == 1


def test_an_error_propagates_and_the_thread_count_is_restored(three_threads) -> None:
    def task(i: int) -> int:
        if i == 5:
            raise RuntimeError("task 5 failed")
        return i

    with pytest.raises(RuntimeError, match="task 5"):
        map_per_core(task, range(8))
    assert torch.get_num_threads() == 3


def test_one_thread_runs_in_order_on_the_caller(three_threads) -> None:
    torch.set_num_threads(1)
    assert map_per_core(lambda i: threading.get_ident(), range(3)) == [threading.get_ident()] * 3
