"""The application: ``tune(source, target, work_dir, config)`` resolves a source into tasks (``sources``), checks that
it compiles (``compile_check``), runs MetaSchedule's search with the chosen cost model (``run``), and reports the
compiled result against PyTorch (``report``, ``numerics``, ``fast_math``)."""

from tlp.tune.run import TaskResult, TuneConfig, TuneInterrupted, build_report, tune

__all__ = ["TaskResult", "TuneConfig", "TuneInterrupted", "build_report", "tune"]
