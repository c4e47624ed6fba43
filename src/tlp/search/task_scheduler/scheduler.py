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

A resumed run (trials already in the database) continues rather than starting over: a task measured before keeps
its history (its best latency after each earlier batch, from the run's ``history.jsonl``; just its best when the
records came from elsewhere) and gets no first-round batch (MetaSchedule would send every task one more batch,
~1,000 trials on MobileNetV2 at batches of 32), and the cost model first learns from the stored measurements
(MetaSchedule's starts untrained, so a resumed search ran as if blind).

One departure, to spend the time measuring: a task whose design space holds a single program (no sampled
decision in any design space: reshapes, concatenations, elementwise ops) is terminated as soon as that program is
measured. MetaSchedule would pick it again and run its evolutionary search until five rounds in a row find
nothing new; on DenseNet-121 that was 70 such tasks x 5 empty searches of ~10 s each, about an hour of a
two-hour run with nothing measured.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms
from tlp.dataset.store import mean_latency
from tlp.search.task_scheduler.task_profile import most_decisions

_NO_LATENCY_MS = 1e9  # what MetaSchedule records for a failed build or run


def records_by_task(database: Any, mods: list[Any]) -> list[list[Any]]:
    """The tuning records ``database`` holds for each of ``mods`` (workloads matched by structural hash)."""
    by_key: dict[str, list[Any]] = {}
    for record in database.get_all_tuning_records():
        by_key.setdefault(str(ms.utils.shash2hex(record.workload.mod)), []).append(record)
    return [by_key.get(str(ms.utils.shash2hex(mod)), []) for mod in mods]


def _continued(history: list[float], best: float | None) -> list[float]:
    """A resumed task's history: the logged one when it ends at the database's best, else just that best."""
    if best is None:
        return []
    if history and abs(history[-1] - best) <= 1e-6 * best:
        return history
    return [best]


def batch_histories(history_path: str | Path, tasks: int) -> list[list[float]]:
    """Each task's best latency (ms) after each of its batches, from a tuning run's ``history.jsonl`` (one line
    per measured batch: the task and every task's best in seconds; lines cut by a kill are skipped)."""
    histories: list[list[float]] = [[] for _ in range(tasks)]
    path = Path(history_path)
    if not path.exists():
        return histories
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
            task, best = int(entry["task"]), entry["best_s"]
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= task < tasks and len(best) == tasks:
            histories[task].append(best[task] * 1e3 if best[task] is not None else _NO_LATENCY_MS)
    return histories


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

    def __init__(self, alpha: float = 0.2, window_size: int = 3, seed: int = 0, trials_per_task: int | None = None,
                 measured_before: list[int] | None = None, best_ms_before: list[float | None] | None = None,
                 history_ms_before: list[list[float]] | None = None) -> None:
        super().__init__()
        # A resumed run: each task's best latency after each of its earlier batches (tune's history.jsonl), so the
        # rule continues as in an unbroken run; a task without one (records from elsewhere) starts from its best.
        self.history_ms_before = [list(h) for h in history_ms_before or []]
        # MetaSchedule's per-task cap is one number per run; a resumed run's tasks have measured different
        # amounts before, so each task is also ended here once its own total (earlier runs + this one) is reached.
        self.trials_per_task = trials_per_task
        self.measured = list(measured_before or [])
        self.best_ms_before = list(best_ms_before or [])  # per task: best valid latency of earlier runs (None: none)
        self.alpha = alpha
        self.window_size = window_size
        self.rng = random.Random(seed)
        self.round_robin = 0  # tasks sent so far in the first round
        self.first_round_joined = False  # GradientBased joins every task once, when the first round is sent
        self.best_ms: list[list[float]] = []  # per task: its best latency after each joined batch
        self.one_program: dict[int, bool] = {}  # per task, once asked: does its design space hold one program?

    def next_task_id(self) -> int:
        tasks = self._outer().tasks_  # pylint: disable=no-member
        if not self.best_ms:
            self.measured += [0] * (len(tasks) - len(self.measured))
            self.best_ms_before += [None] * (len(tasks) - len(self.best_ms_before))
            self.history_ms_before += [[]] * (len(tasks) - len(self.history_ms_before))
            self.best_ms = [_continued(history, best) for history, best in zip(self.history_ms_before,
                                                                               self.best_ms_before)]
            self._learn_from_database(tasks)
        self._join_finished(tasks, wait_all=False)
        while self.round_robin < len(tasks):
            task_id = self.round_robin
            self.round_robin += 1
            # A resumed run: a task with its trials, or with the one program its space holds, is not searched again.
            if self._budget_spent(task_id) or (self.measured[task_id] and self._one_program(task_id)):
                self._terminate(task_id)
                continue
            if self.best_ms[task_id]:  # measured by an earlier run: its first round is done
                continue
            return task_id
        if not self.first_round_joined:  # GradientBased waits for every task here (gradients need a result each)
            self._join_finished(tasks, wait_all=True)
            self.first_round_joined = True
        while True:
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
                if tasks[task_id].is_terminated:  # that batch completed its budget: choose among the others
                    continue
            return task_id

    def _learn_from_database(self, tasks: Any) -> None:
        """A resumed run: the cost model learns from each task's stored measurements before anything is searched."""
        outer = self._outer()
        database, cost_model = outer.database_, outer.cost_model_  # pylint: disable=no-member
        if database is None or cost_model is None or not any(self.measured):
            return
        for task, stored in zip(tasks, records_by_task(database, [task.ctx.mod for task in tasks])):
            records = [r for r in stored if mean_latency(r.run_secs) is not None]
            if records:
                cost_model.update(task.ctx, [r.as_measure_candidate() for r in records],
                                  [ms.runner.RunnerResult(run_secs=r.run_secs, error_msg=None) for r in records])

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
        self.measured[task_id] += len(results)
        # A batch of at most one program is how a one-program space shows itself (a tunable one sends a full batch).
        if self._budget_spent(task_id) or (len(results) <= 1 and self._one_program(task_id)):
            self._terminate(task_id)

    def _budget_spent(self, task_id: int) -> bool:
        return self.trials_per_task is not None and self.measured[task_id] >= self.trials_per_task

    def _terminate(self, task_id: int) -> None:
        ms.task_scheduler.TaskScheduler.terminate_task(self._outer(), task_id)  # pylint: disable=no-member

    def _one_program(self, task_id: int) -> bool:
        if task_id not in self.one_program:
            context = self._outer().tasks_[task_id].ctx  # pylint: disable=no-member
            spaces = context.space_generator.generate_design_space(context.mod)
            self.one_program[task_id] = len(spaces) == 1 and most_decisions(spaces) == 0
        return self.one_program[task_id]

    def _gradient(self, task_id: int, weight: float) -> float:
        history = self.best_ms[task_id]
        if not history or history[-1] >= _NO_LATENCY_MS:
            return -1e9  # no valid program yet: GradientBased skips such a task unless nothing else is left
        n, w, best = len(history), self.window_size, history[-1]
        recent = (history[n - 1 - w] - best) / w if n >= 1 + w else 0.0
        return (self.alpha * recent + (1 - self.alpha) * best / n) * weight


@derived_object
class HeadroomScheduler(RecordingGradientScheduler._cls):  # pylint: disable=protected-access (TVM's way to subclass)
    """The recording scheduler choosing by each task's *headroom*: how far its weighted latency is above what it
    would run at the best throughput any task of this run has reached, per batch it has had.

    Why: the gradient rule sends the next batch to the task with the largest weighted latency per batch (until a
    task has four batches, its recent improvement counts for nothing), so a heavy task that is already fast keeps
    drawing batches while a lighter one running at a fraction of the machine's throughput waits. With few
    measurements per task (a trained model's first rounds of 2 programs) that is most of a small budget. Here a
    task's priority is

        weight × (best latency − flops / peak) / batches so far,   peak = max over tunable tasks of flops / best latency

    an empirical roofline: ``peak`` is what this machine has shown it can do on this network's kernels, so a task
    at it has nothing left to gain, a task at half of it half its latency. Tasks without flops (reshapes, pooling)
    count with their whole latency, as in the gradient rule; so does a memory-bound one in effect (its flops are
    far below what any bandwidth allows), which is why, once BERT-tiny's matmuls sit at the peak, ``layer_norm``
    draws most later batches (624 of 1,000 in one run). On ResNet-50 at 1,000 trials it reached XGBoost's
    final latency in 1.3-1.8x fewer trials than the gradient rule.

    """

    def __init__(self, flops: list[float], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flops = [float(f) for f in flops]

    def _peak(self) -> float:
        """Highest throughput (flops per ms) any task with a search to run has reached so far; 0 before any has.

        A one-program task is left out: nothing tunes it, and its flop count need not be what its time is spent
        on — BERT-tiny's GELU (fast-math ``erf``, a polynomial counted as flops, memory-bound in fact) "reached"
        468 GFLOPS beside matmuls at 229, which made every matmul at its best look half done and kept its batches
        coming while ``layer_norm`` (2x off its best) waited from trial 54 to 166 and softmax from 21 to 150."""
        return max((f / h[-1] for i, (f, h) in enumerate(zip(self.flops, self.best_ms))
                    if f > 0 and h and 0 < h[-1] < _NO_LATENCY_MS and not self.one_program.get(i)), default=0.0)

    def _gradient(self, task_id: int, weight: float) -> float:
        history = self.best_ms[task_id]
        if not history or history[-1] >= _NO_LATENCY_MS:
            return -1e9
        peak = self._peak()
        bound = self.flops[task_id] / peak if peak > 0 else 0.0
        return weight * (history[-1] - bound) / len(history)
