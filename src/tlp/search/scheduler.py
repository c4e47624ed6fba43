"""Which task the search measures next: MetaSchedule's gradient scheduler, recording every batch as it finishes.

MetaSchedule's ``GradientBased`` scheduler starts with a round that sends one batch of every task and records
none of them (no database write, no measure callback) until the round ends. On a network with 141 tasks that
round is ~4,500 measured programs, over an hour on 2 cores: a Ctrl-C, a kill or a session's end inside it loses
all of them. :class:`RecordingGradientScheduler` picks tasks exactly as ``GradientBased`` does (first one batch of
each task in order, then the task with the largest weighted gradient of its best latency), but joins each task as
soon as its batch is done, so every finished batch is in the database (and, with ``--dataset``, in the origin
log) before the next one is generated. With MetaSchedule's ``LocalRunner`` (which measures before it returns)
that is every batch but the one in flight; an RPC runner's batches are joined once they are done, as before.

A side effect, wanted: in the first round the cost model is updated after every batch rather than once after
the whole round, so later tasks of that round already see a model trained on the earlier ones.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms

_NO_LATENCY_MS = 1e9  # what MetaSchedule records for a failed build or run


def run_ms(result: Any) -> float:
    """A runner result's median run time in ms, as MetaSchedule scores a trial (failures: 1e9)."""
    if result.error_msg is not None or not result.run_secs:
        return _NO_LATENCY_MS
    return statistics.median(float(s) for s in result.run_secs) * 1e3


@derived_object
class RecordingGradientScheduler(ms.task_scheduler.PyTaskScheduler):
    """MetaSchedule's gradient task scheduler (same choice of tasks) that records each batch when it is done.

    ``alpha`` and ``window_size`` are ``GradientBased``'s: a task's gradient is
    ``alpha * (best[n-1-w] - best[n-1]) / w + (1 - alpha) * best[n-1] / n`` times its weight, over the history of
    its best latency after each joined batch; ties are broken at random (``seed``).
    """

    def __init__(self, alpha: float = 0.2, window_size: int = 3, seed: int = 0) -> None:
        super().__init__()
        self.alpha = alpha
        self.window_size = window_size
        self.rng = random.Random(seed)
        self.round_robin = 0  # tasks sent so far in the first round
        self.first_round_joined = False
        self.best_ms: list[list[float]] = []  # per task: its best latency after each joined batch

    def next_task_id(self) -> int:
        tasks = self._outer().tasks_  # pylint: disable=no-member
        if not self.best_ms:
            self.best_ms = [[] for _ in tasks]
        # At the end of the first round GradientBased waits for every task (their gradients need one result each).
        wait_all = self.round_robin == len(tasks) and not self.first_round_joined
        self._join_finished(tasks, wait_all)
        self.first_round_joined = self.first_round_joined or wait_all
        if self.round_robin < len(tasks):
            self.round_robin += 1
            return self.round_robin - 1
        alive = [i for i, task in enumerate(tasks) if not task.is_terminated]
        if not alive:
            return -1
        gradients = [self._gradient(i, float(tasks[i].task_weight)) for i in alive]
        if max(gradients) == min(gradients):
            task_id = alive[self.rng.randrange(len(alive))]
        else:
            task_id = alive[gradients.index(max(gradients))]
        if tasks[task_id].runner_futures is not None:  # still running (RPC): wait for it, as GradientBased does
            self._join(task_id)
        return task_id

    def _join_finished(self, tasks: Any, wait_all: bool) -> None:
        """Join every task whose batch is done (``wait_all``: every task with a batch out, waiting for it)."""
        for i, task in enumerate(tasks):
            futures = task.runner_futures
            if task.is_terminated or futures is None:
                continue
            if wait_all or all(future.done() for future in futures):
                self._join(i)

    def _join(self, task_id: int) -> None:
        # The inherited join is MetaSchedule's own: results to the search strategy, then the measure callbacks
        # (AddToDatabase first: the batch is stored before anything else happens).
        results = self.join_running_task(task_id)
        history = self.best_ms[task_id]
        history.append(min([run_ms(r) for r in results] + history[-1:], default=_NO_LATENCY_MS))

    def _gradient(self, task_id: int, weight: float) -> float:
        history = self.best_ms[task_id]
        if not history or history[-1] >= _NO_LATENCY_MS:
            return -1e9  # no valid program yet: GradientBased skips such a task unless nothing else is left
        n, w, best = len(history), self.window_size, history[-1]
        recent = (history[n - 1 - w] - best) / w if n >= 1 + w else 0.0
        return (self.alpha * recent + (1 - self.alpha) * best / n) * weight
