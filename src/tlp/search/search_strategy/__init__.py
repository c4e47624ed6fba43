"""Search strategies: which candidates MetaSchedule's evolutionary search sends to be measured.

``first_round``: a small first batch per task; ``diverse``: batches spread over program structures; ``library`` and
``transfer``: stored or sibling schedules replayed on a task as first-round candidates."""
