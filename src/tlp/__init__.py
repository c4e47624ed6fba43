"""TLP: a learned cost model that ranks TVM MetaSchedule candidates from their schedule-primitive traces."""

__version__ = "0.1.0"


class TLPError(Exception):
    """Base of the errors TLP reports to users as one clear line (bad input, unusable files, unreachable devices)."""


class StageError(TLPError):
    """A model that fails at one stage (export, import, compile): one line naming the model, the stage, what failed
    (the PrimFunc or op when known) and what to try. ``tlp --debug`` adds the traceback of the cause."""

    def __init__(self, model: str, stage: str, what: str, hint: str) -> None:
        self.model, self.stage, self.what, self.hint = model, stage, what, hint
        super().__init__(f"{model}: {stage} failed: {what}; try: {hint}")


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception as one short line: TVM's and torch's messages span many lines; keep TVM's ``Check failed`` line
    when there is one, else the first lines that are not stack frames."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    telling = [line for line in lines if not line.startswith(("File ", "at ", "^", "Stack trace", "[bt]", "0:", "1:"))
               and not line[:3].strip().rstrip(":").isdigit()]
    checks = [line for line in telling if "Check failed" in line]
    text = checks[-1] if checks else " ".join(telling[:3] or lines[:1])  # e.g. LLVM's verifier: 3 short lines
    text = f"{type(error).__name__}: {text}" if type(error).__name__ not in text else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def __getattr__(name: str):  # lazy: ``import tlp`` must not import TVM (slow); ``tlp.TLPCostModel`` does
    if name == "TLPCostModel":
        from tlp.search.cost_model import TLPCostModel  # pylint: disable=import-outside-toplevel

        return TLPCostModel
    raise AttributeError(f"module 'tlp' has no attribute {name!r}")
