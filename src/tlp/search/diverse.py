"""Batches spread over program structures: MetaSchedule's evolutionary search, each batch capped per structure.

MetaSchedule measures the cost model's top-scored candidates, a batch at a time. Those are mostly one structure
(the same unroll depth and compute locations) with different tile sizes, and among programs that close every model
we have orders pairs at about chance (``benchmarks/batch_ranking.py``), so most of such a batch is a random draw
from the model's favourite structure. When the favourite is the wrong one the search never learns otherwise: on
BERT-tiny (Zen 4) TLP measured 90 ``layer_norm`` programs, mostly at maximal unroll with the reductions at the
root, and ended at 1.8x the latency XGBoost reached with the reductions computed at their consumers and no unroll
(benchmarks/README.md, "BERT-tiny and MobileNetV2 at 1,000 trials on a Zen 4").

:class:`StructureDiverseSearch` asks the inner ``EvolutionarySearch`` for ``pool`` times the batch (its best-scored
unmeasured candidates) and measures the cost model's best of them with at most ``max_per_structure`` per
structure, filling any places left by score. A *structure* is a trace's discrete decisions other than tile sizes
(``SampleCategorical``: unroll depth and the like; ``SampleComputeLocation``), so each structure the model ranks
high is measured with its best tiles, and the model's favourite still gets the first places.

With ``new_structures`` > 0, that many places of every batch go to structures the task has not measured yet: the
model's best-scored among random draws of the design space (MetaSchedule's ``ReplayTrace``, ``pool`` times the
batch of them) whose structure is new, from the task's second batch on. Why: spreading alone did not reach
``layer_norm``'s fast structure, because every candidate the evolution offers descends from the model's
favourites, and the model never ranks that structure in its top 32; a random draw does not ask the model first,
and once measured the program teaches the online model (and seeds the evolution, which starts from the task's best
measured programs).

With ``new_decisions`` > 0, up to that many places of every batch go to the model's best-scored candidate (of the
evolution's pool and of random draws as above) that carries a *decision value* the task has not measured: a value of
one of its structural sampling instructions (the unroll depth of the first ``SampleCategorical``, the location of
the third ``SampleComputeLocation`` ...), from the task's second batch on. Why: new structures are the product of
those values (hundreds per task: ``layer_norm`` 4 unroll depths x 3-4 locations for each of 4 blocks) and never run
out, so their places cost every batch of the search; the values are a few dozen, one program carries one of each,
and a handful of programs measures them all, after which the places go back to the evolution. In a simulation on
the stored programs of BERT-tiny's tasks (Zen 4; the model's picks "measured" from the stored latencies, fine-tuned
as the search does; ``benchmarks/decision_values_sim.py``), 4 such places of 8 took ``layer_norm`` from 2.1x the
best to the best after 18 measurements, where the model's picks alone stayed at 1.8x after 58.

With ``first_batch_per_structure`` > 0, a task's first batch (nothing of it measured yet) holds at most that many
candidates of one structure instead. Why: a first round of 2 picks per task (``tlp.search.first_round``) is too
small for ``max_per_structure`` to act on, and the model's two best were mostly one structure (18 and 22 of
MobileNetV2's 33 tasks in the two cascade runs on a Rocket Lake), while the structure of the task's best program
after 1,000 trials was among the first round's in only 19 and 15 of them; one structure each hedges the model's
favourite, and the first round decides a network's latency at ~100 trials. Measured on MobileNetV2 (Rocket Lake,
2 seeds, picks re-timed) it made the first rounds worse (4.6 / 4.9 ms against 4.3), so it is off by default.

The inner search counts every candidate it hands out as measured and never proposes it again; the ones left out
here are the model's lower-scored near-duplicates of structures already in the batch, and mutation keeps making
others like them. The trial budget is kept here (the inner one is ``pool`` times larger).
"""

from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms
from tlp.search.first_round import measured_before

STRUCTURAL_SAMPLES = ("SampleCategorical", "SampleComputeLocation")


def structure_of(trace: Any) -> tuple[tuple[str, str], ...]:
    """A trace's structure: the decisions of its sampling instructions other than tile sizes, in trace order."""
    decisions = trace.decisions
    return tuple((inst.kind.name, str(decisions[inst])) for inst in trace.insts
                 if inst.kind.name in STRUCTURAL_SAMPLES and inst in decisions)


def decision_values(structure: tuple[tuple[str, str], ...]) -> set[tuple[int, str, str]]:
    """A structure's decisions as ``(position among the structural samples, kind, value)``: what one program
    measures of a task's structural choices."""
    return {(position, kind, value) for position, (kind, value) in enumerate(structure)}


def spread_over_structures(ranked: list[Any], size: int, max_per_structure: int) -> list[int]:
    """Indices of ``size`` items of ``ranked`` (pairs ``(structure, item)``, best first): best first, at most
    ``max_per_structure`` of one structure, then the best of the rest where too few structures were offered."""
    taken: list[int] = []
    per_structure: dict[Any, int] = {}
    for i, (structure, _) in enumerate(ranked):
        if len(taken) == size:
            break
        if per_structure.get(structure, 0) < max_per_structure:
            per_structure[structure] = per_structure.get(structure, 0) + 1
            taken.append(i)
    chosen = set(taken)
    rest = [i for i in range(len(ranked)) if i not in chosen]
    return sorted(taken + rest[:size - len(taken)])


@derived_object
class StructureDiverseSearch(ms.search_strategy.PySearchStrategy):
    """``EvolutionarySearch(population_size)`` measuring, per batch, the cost model's best candidates of ``pool``
    times the batch with at most ``max_per_structure`` of one structure (``first_batch_per_structure`` in the
    task's first batch, if given), ``new_structures`` places for the
    model's best random draws of structures the task has not measured and up to ``new_decisions`` places for its
    best candidates carrying decision values the task has not measured."""

    def __init__(self, population_size: int, max_per_structure: int, pool: int = 4, new_structures: int = 0,
                 new_decisions: int = 0, first_batch_per_structure: int = 0) -> None:
        super().__init__()
        if max_per_structure < 1 or pool < 1:
            raise ValueError(f"max_per_structure and pool must be at least 1, not {max_per_structure} and {pool}")
        if first_batch_per_structure < 0:
            raise ValueError(f"first_batch_per_structure must be at least 0 (0: max_per_structure), not "
                             f"{first_batch_per_structure}")
        if new_structures < 0 or new_decisions < 0:
            raise ValueError(f"new_structures and new_decisions must be at least 0, not {new_structures} and "
                             f"{new_decisions}")
        self.population_size = population_size
        self.max_per_structure = max_per_structure
        self.pool = pool
        self.new_structures = new_structures
        self.new_decisions = new_decisions
        self.first_batch_per_structure = first_batch_per_structure
        # The first-batch cap applies: the option is set and nothing of the task was measured (pre_tuning reads it).
        self.first_batch = bool(first_batch_per_structure)
        self.inner = ms.search_strategy.EvolutionarySearch(population_size=population_size)
        self.random_draws = ms.search_strategy.ReplayTrace() if new_structures or new_decisions else None
        self.context: Any = None
        self.cost_model: Any = None
        self.batch = 0
        self.max_trials = 0
        self.measured = 0
        self.measured_structures: set[Any] = set()
        self.measured_decisions: set[tuple[int, str, str]] = set()

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access
        if self.random_draws is not None:
            self.random_draws._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any, database: Any = None,
                   cost_model: Any = None) -> None:
        self.max_trials, self.batch, self.measured, self.cost_model = max_trials, num_trials_per_iter, 0, cost_model
        # The inner search stops at its own budget, counted in measured results: pool times ours never binds first.
        self.inner.pre_tuning(max_trials * self.pool, num_trials_per_iter * self.pool, design_spaces, database,
                              cost_model)
        self.measured_structures, self.measured_decisions = set(), set()
        # Read from the database, not from this object: tlp.search.first_round restarts the search after the
        # task's first (small) batch, and a resumed run's tasks were measured before.
        self.first_batch = bool(self.first_batch_per_structure) and not measured_before(database, self.context.mod)
        if self.random_draws is not None:
            # ReplayTrace draws its batch afresh on every call; its budget is never reached (see _random_draws).
            self.random_draws.pre_tuning(1 << 30, num_trials_per_iter * self.pool, design_spaces, database,
                                         cost_model)
            if database is not None and database.has_workload(self.context.mod):  # a resumed task
                workload = database.commit_workload(self.context.mod)
                self._record_measured(record.trace for record in database.get_top_k(workload, 1 << 30))

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        if self.random_draws is not None:
            self.random_draws.post_tuning()
        self.cost_model = None

    def generate_measure_candidates(self) -> list[Any] | None:
        size = min(self.batch, self.max_trials - self.measured)
        if size <= 0:
            return None
        candidates = self.inner.generate_measure_candidates()
        if candidates is None:
            return None
        candidates = list(candidates)
        # Before the task's first measurement every structure is new, and the model's picks are the better guess.
        started = self.cost_model is not None and bool(self.measured_structures)
        new_structures = min(self.new_structures, size) if started else 0
        new_decisions = min(self.new_decisions, size - new_structures) if started else 0
        draws = self._random_draws() if new_structures or new_decisions else []
        if (len(candidates) <= size and not draws) or self.cost_model is None:
            return candidates[:size]
        # Scored again: the inner search's order is its epsilon-greedy pick (a random candidate or more among the
        # best-scored ones), not the model's ranking.
        offered = candidates + draws
        scores = [float(s) for s in self.cost_model.predict(self.context, offered)]
        structures = [structure_of(c.sch.trace) for c in offered]  # once each: a walk over the trace through the FFI
        order = sorted(range(len(candidates)), key=lambda i: -scores[i])
        ranked = [(structures[i], i) for i in order]
        cap = self.first_batch_per_structure if self.first_batch and not self.measured else self.max_per_structure
        taken = [ranked[k][1] for k in spread_over_structures(ranked, size - new_structures - new_decisions, cap)]
        if new_decisions:
            seen = self.measured_decisions.union(*(decision_values(structures[i]) for i in taken))
            for i in sorted(range(len(offered)), key=lambda i: -scores[i]):
                if len(taken) == size - new_structures:
                    break
                values = decision_values(structures[i])
                if i not in taken and not values <= seen:
                    seen |= values
                    taken.append(i)
        if new_structures:
            known = self.measured_structures | {structures[i] for i in taken}
            for i in sorted(range(len(candidates), len(offered)), key=lambda i: -scores[i]):
                if len(taken) == size:
                    break
                if structures[i] not in known:
                    known.add(structures[i])
                    taken.append(i)
        # Too few new structures or values offered (every value measured): the places go back to the evolution.
        taken += [i for _, i in ranked if i not in taken][:size - len(taken)]
        return [offered[i] for i in taken]

    def _random_draws(self) -> list[Any]:
        """``pool`` times the batch of fresh random programs of the task's design spaces."""
        draws = self.random_draws.generate_measure_candidates()
        if draws is None:
            return []
        self.random_draws.notify_runner_results([], [])  # nothing of them is "measured" by ReplayTrace's count
        return list(draws)

    def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
        self.inner.notify_runner_results(measure_candidates, results)
        self.measured += len(results)
        self._record_measured(c.sch.trace for c in measure_candidates)

    def _record_measured(self, traces: Any) -> None:
        for trace in traces:
            structure = structure_of(trace)
            self.measured_structures.add(structure)
            self.measured_decisions |= decision_values(structure)

    def clone(self) -> Any:
        return StructureDiverseSearch(self.population_size, self.max_per_structure, self.pool, self.new_structures,
                                      self.new_decisions, self.first_batch_per_structure)
