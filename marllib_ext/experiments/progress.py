"""``marllib-ext benchmark``'s console lines: trials done, running, waiting and failed,
env steps and the time left, and each trial as it ends, fails or is kept."""

from __future__ import annotations

import contextlib
import time
from typing import Any

PROGRESS_EVERY_S = 30.0


def _status_counts(trials) -> dict[str, int]:
    counts = {"done": 0, "running": 0, "waiting": 0, "failed": 0}
    for trial in trials:
        status = trial.status
        key = {"TERMINATED": "done", "RUNNING": "running", "ERROR": "failed"}.get(status, "waiting")
        counts[key] += 1
    return counts


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def progress_callback(every_s: float = PROGRESS_EVERY_S):
    """A Tune callback printing trials done, running, waiting and failed, env steps and
    the estimated time left (from this session's env-step rate) every ``every_s``
    seconds, and each trial as it ends or fails."""
    from ray.tune import Callback

    class GridProgress(Callback):
        def setup(self, **info) -> None:
            # Called at every start, a continued experiment's too.
            self.steps: dict[str, float] = {}
            self.first_steps: dict[str, float] = {}
            self.started = time.monotonic()
            self.printed = time.monotonic()

        def on_trial_result(self, iteration, trials, trial, result, **info):
            steps = float(result.get("timesteps_total", 0))
            self.first_steps.setdefault(trial.trial_id, steps - _iteration_steps(result))
            self.steps[trial.trial_id] = steps

        def on_trial_complete(self, iteration, trials, trial, **info):
            name = trial.config["trial"]["name"]
            if "timesteps_total" in (trial.last_result or {}):
                print(f"trial done: {name}", flush=True)
            else:  # it reported nothing: its finished run was stored already
                print(f"trial kept: {name} (its folder holds the finished run)", flush=True)

        def on_experiment_end(self, trials, **info):
            self._line(trials)

        def on_trial_error(self, iteration, trials, trial, **info):
            error = _first_error_line(trial)
            print(f"trial FAILED: {trial.config['trial']['name']}: {error}", flush=True)

        def on_step_end(self, iteration, trials, **info):
            if time.monotonic() - self.printed >= every_s:
                self._line(trials)

        def _line(self, trials) -> None:
            self.printed = time.monotonic()
            counts = _status_counts(trials)
            line = " ".join(f"{v} {k}" for k, v in counts.items())
            budgets = [t.config["trial"]["run"]["stop"].get("env_steps") for t in trials]
            done_steps = sum(
                budget if t.status == "TERMINATED" and budget else self.steps.get(t.trial_id, 0.0)
                for t, budget in zip(trials, budgets, strict=True)
            )
            if all(budgets):
                total = sum(budgets)
                line += f" | env steps {done_steps:,.0f} / {total:,.0f}"
                gained = sum(self.steps[k] - self.first_steps[k] for k in self.steps)
                elapsed = time.monotonic() - self.started
                if gained > 0 and counts["failed"] + counts["done"] < len(trials):
                    left = (total - done_steps) / (gained / elapsed)
                    line += f" | elapsed {_duration(elapsed)}, about {_duration(left)} left"
            else:
                line += f" | env steps {done_steps:,.0f}"
            print(f"[benchmark] trials: {line}", flush=True)

    return GridProgress()


def _iteration_steps(result: dict[str, Any]) -> float:
    iterations = max(1.0, float(result.get("training_iteration", 1)))
    return float(result.get("timesteps_total", 0)) / iterations


def _first_error_line(trial) -> str:
    with contextlib.suppress(Exception):
        error = trial.get_pickled_error() or trial.get_error()
        if error is not None:
            lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
            return lines[-1] if lines else type(error).__name__
    return "see the trial's error.txt"


# ---- the experiment ------------------------------------------------------------------
