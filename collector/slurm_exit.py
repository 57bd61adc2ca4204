"""How a Slurm run ended: its exit code and signal, from the job record and its steps.

The rule (docs/collectors.md, "Exit status"):

1. The job-level ``exit_code``: a raw wait(2) status (22.05 squeue; 23.02's
   ``{"set", "number"}``) or ``{status, return_code, signal}`` (sacct, 23.11+).
2. Slurm writes SUCCESS/0 there for TIMEOUT and CANCELLED jobs; only the batch step
   holds the signal (SIGTERM, 15). When the job level has no code and no signal, the
   batch step's signal is the run's.
3. A run whose job level is clean but whose DerivedExitCode (the highest exit code of
   its srun steps) or one of its steps is not is *not* a clean exit: the run keeps the
   derived code (and signal) and names the failed step in its reason, e.g.
   ``step 4711.0 (python) FAILED: exit code 1``. A COMPLETED job whose training step
   crashed therefore reaches the failure classifier.
4. Slurm 22.05's sacct prints ``{"status": "SUCCESS", "return_code": 0}`` for a FAILED
   job that exited 3, and for a FAILED step, and 0 as DerivedExitCode (seen on a real
   22.05.8): a FAILED run with exit 0 and no signal has an unknown code (NULL), and so
   has a clean run with a FAILED srun step (its reason names the step).

Codes are 0-255 and signals 1-127; anything else is refused (NULL, counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.bounds import MAX_EXIT_CODE, MAX_SIGNAL
from collector.slurm_fields import Drops, SlurmParseError, clean_text, number, state

__all__ = ["Ending", "exit_status", "run_ending"]

_NO_STEP = ("batch", "extern", "interactive")  # not srun steps: no part of DerivedExitCode
_FAILED_STEP = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL",
                          "DEADLINE"})


def _wait_status(raw: int, what: str) -> tuple[int | None, int | None]:
    if not 0 <= raw <= 0xFFFF:
        raise SlurmParseError(f"{what}: {raw} is not a wait status", what.rsplit(": ", 1)[-1])
    return (raw >> 8) & 0xFF, (raw & 0x7F) or None


def exit_status(v: Any, what: str) -> tuple[int | None, int | None]:
    """(return code, signal) of any of Slurm's exit-code forms; (None, None) if unset."""
    if v is None:
        return None, None
    if isinstance(v, int) and not isinstance(v, bool):
        return _wait_status(v, what)
    if isinstance(v, dict) and "set" in v:  # 23.02: a number-wrapped wait status
        raw = number(v, what)
        return (None, None) if raw is None else _wait_status(raw, what)
    if isinstance(v, dict):
        status = v.get("status")
        if isinstance(status, list):
            status = status[0] if status else None
        code = number(v.get("return_code"), f"{what}.return_code", 0, MAX_EXIT_CODE)
        sig = v.get("signal")
        signal = None
        if isinstance(sig, dict):
            raw = sig.get("id", sig.get("signal_id"))
            signal = number(raw, f"{what}.signal", 0, MAX_SIGNAL)
        if status == "PENDING" and not code and not signal:
            return None, None
        return code, signal
    raise SlurmParseError(f"{what}: expected an exit code, got {v!r:.80}",
                          what.rsplit(": ", 1)[-1])


@dataclass(frozen=True)
class Ending:
    """How a run ended: ``exit_code`` 0-255, ``signal`` 1-127, ``note`` (failed step)."""

    exit_code: int | None
    signal: int | None
    note: str | None = None


@dataclass(frozen=True)
class _Step:
    id: str
    name: str
    state: str | None
    code: int | None
    signal: int | None

    @property
    def is_batch(self) -> bool:
        return self.name == "batch" or self.id == "batch" or self.id.endswith(".batch")

    @property
    def is_srun(self) -> bool:
        return not any(self.id == s or self.id.endswith("." + s) for s in _NO_STEP)


def _steps(v: Any, what: str, drops: Drops) -> list[_Step]:
    if not isinstance(v, list):
        return []
    out = []
    for i, s in enumerate(v):
        if not isinstance(s, dict):
            continue
        info = s.get("step") if isinstance(s.get("step"), dict) else {}
        sid = info.get("id", "")
        if isinstance(sid, dict):  # {"job_id": .., "step_id": ..}
            sid = f"{sid.get('job_id', '')}.{sid.get('step_id', '')}"
        name = info.get("name")
        code, signal = drops.soft(exit_status, s.get("exit_code"),
                                  f"{what}: steps[{i}].exit_code", default=(None, None))
        out.append(_Step(clean_text(str(sid)), clean_text(name) if isinstance(name, str)
                         else "", drops.soft(state, s.get("state"), f"{what}: steps.state"),
                         code, signal))
    return out


def run_ending(rec: dict, run_state: str | None, what: str, drops: Drops) -> Ending:
    """The exit code, signal and failed-step note of one squeue/sacct record (the rule
    in the module doc). Unreadable codes are NULL and counted in ``drops``."""
    code, signal = drops.soft(exit_status, rec.get("exit_code"), f"{what}: exit_code",
                              default=(None, None))
    steps = _steps(rec.get("steps"), what, drops)
    if not code and not signal:
        batch = next((s for s in steps if s.is_batch and s.signal), None)
        if batch is not None:
            code, signal = batch.code, batch.signal
    note = None
    if not code and not signal:
        dcode, dsignal = drops.soft(exit_status, rec.get("derived_exit_code"),
                                    f"{what}: derived_exit_code", default=(None, None))
        failed = [s for s in steps
                  if s.is_srun and (s.code or s.signal or s.state in _FAILED_STEP)]
        worst = max(failed, key=lambda s: (s.code or 0, s.signal or 0), default=None)
        if dcode or dsignal:
            code, signal = dcode, dsignal
        elif worst is not None:  # no code on a FAILED step: unknown, never a false 0
            code, signal = (worst.code or None), worst.signal
        if worst is not None:
            note = (f"step {worst.id} ({worst.name or '?'}) {worst.state or 'ended'}: "
                    + (f"signal {worst.signal}" if worst.signal else
                       f"exit code {worst.code}" if worst.code else "exit code unknown"))
        elif dcode or dsignal:
            note = f"DerivedExitCode {dcode or 0}:{dsignal or 0}"
    if run_state == "FAILED" and code == 0 and not signal:
        code = None
    return Ending(code, signal, note)
