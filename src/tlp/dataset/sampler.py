"""Candidate programs for one task, drawn from MetaSchedule's own design space.

A useful dataset needs both bad and good programs (a cost model must rank the whole space, and the search spends
its time near the good end), so candidates come from two sources, as in TenSet:

- ``random``: MetaSchedule's ``ReplayTrace`` — every sampling instruction of a design-space sketch re-drawn at
  random, then the postprocessors;
- ``evolved``: MetaSchedule's ``EvolutionarySearch`` guided by its XGBoost model trained on this task's
  measurements so far, seeded with the best measured programs — the programs a real tuning run would measure;
- ``guided``: the same search guided by any cost model with nothing measured (a trained TLP model): programs
  near the good end *as that model sees it*, for a teacher to rank where no measurement exists
  (``tlp.model.distil.with_transfer_set``).
"""

from __future__ import annotations

from typing import Any

from tlp._tvm import ms, register_tensor_intrinsics, structural_hash, to_plain, tvm
from tlp._tvm import trace_json as fast_trace_json
from tlp.dataset.store import MeasuredProgram
from tlp.workloads.task import Task


class EmptyDesignSpaceError(RuntimeError):
    """MetaSchedule generated no schedule at all for a task."""


class CandidateSampler:
    """Draws new (not yet measured) candidates for one task on one target."""

    def __init__(self, task: Task, target: dict[str, Any], num_threads: int = 1) -> None:
        self.task = task
        self.target = tvm.target.Target(target)
        register_tensor_intrinsics(self.target)  # CUDA's schedule rules name its WMMA intrinsics
        self.num_threads = num_threads
        context = self._context("replay-trace", seed=0)
        self.design_spaces = context.generate_design_space()
        if not self.design_spaces:
            raise EmptyDesignSpaceError(f"task {task.name} ({task.key}): MetaSchedule generated an empty design space")

    def _context(self, strategy: Any, seed: int) -> Any:
        return ms.TuneContext(
            self.task.mod,
            target=self.target,
            space_generator="post-order-apply",
            search_strategy=strategy,
            task_name=self.task.name,
            rand_state=seed,
            num_threads=self.num_threads,
        )

    def random(self, count: int, seed: int) -> list[Any]:
        """``count`` candidates with every decision drawn at random."""
        context = self._context(ms.search_strategy.ReplayTrace(), seed)
        return self._draw(context, count)

    def evolved(self, count: int, measured: list[MeasuredProgram], seed: int) -> list[Any]:
        """``count`` candidates from an evolutionary search whose cost model learned from ``measured``."""
        context = self._context(
            ms.search_strategy.EvolutionarySearch(population_size=256, init_measured_ratio=0.2, genetic_num_iters=3),
            seed,
        )
        database = ms.database.MemoryDatabase()
        workload = database.commit_workload(self.task.mod)
        candidates, results = [], []
        target_json = self.target.export()
        for program in measured:
            if program.latency is None:
                continue  # failures carry no throughput for the cost model to learn
            record = ms.database.TuningRecord.from_json(
                [program.trace_json, program.run_secs, target_json, program.args_info],
                workload,
            )
            database.commit_tuning_record(record)
            try:
                candidates.append(record.as_measure_candidate())
            except Exception:  # pylint: disable=broad-except  # a trace that no longer replays teaches nothing
                continue
            results.append(ms.runner.RunnerResult(program.run_secs, None))
        cost_model = ms.cost_model.XGBModel(num_warmup_samples=0)
        if candidates:
            cost_model.update(context, candidates, results)
        return self._draw(context, count, database=database, cost_model=cost_model)

    def guided(self, count: int, cost_model: Any, seed: int, population: int = 128, genetic_iters: int = 2
               ) -> list[Any]:
        """The ``count`` candidates an evolutionary search guided by ``cost_model`` would measure first, with no
        measured program (an empty database: every initial program is a random draw, then evolved under the model;
        no epsilon-greedy random picks). The defaults are those of ``tlp tune``'s zero-measurement search
        (``tlp.search.database.predicted.PredictionConfig``)."""
        context = self._context(
            ms.search_strategy.EvolutionarySearch(population_size=population, init_min_unmeasured=population,
                                                  genetic_num_iters=genetic_iters, eps_greedy=0.0),
            seed,
        )
        return self._draw(context, count, database=ms.database.MemoryDatabase(), cost_model=cost_model)

    def _draw(self, context: Any, count: int, database: Any = None, cost_model: Any = None) -> list[Any]:
        context.pre_tuning(
            max_trials=count,
            num_trials_per_iter=count,
            design_spaces=self.design_spaces,
            database=database,
            cost_model=cost_model,
        )
        try:
            return list(context.generate_measure_candidates() or [])
        finally:
            context.post_tuning()


def program_hash(candidate: Any) -> str:
    """Identity of the scheduled program itself: different traces can produce the same IR."""
    return program_hash_of(candidate.sch.mod)


def program_hash_of(mod: Any) -> str:
    """:func:`program_hash` of a scheduled IRModule."""
    return f"{structural_hash(mod):x}"


def trace_json(candidate: Any) -> Any:
    """The candidate's trace (instructions and decisions) as MetaSchedule serializes it in its database."""
    return fast_trace_json(candidate.sch.trace)


def args_info_json(candidate: Any) -> Any:
    return [to_plain(arg.as_json()) for arg in candidate.args_info]
