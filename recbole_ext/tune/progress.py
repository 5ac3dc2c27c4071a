"""One line per trial event on the console, instead of Ray's tables and logs."""
from __future__ import annotations

import math
import sys
import time

from ray.tune import Callback


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class ProgressLines(Callback):
    """``[done/total] trial epoch N: metric=…`` lines; finished trials add their test metric."""

    def __init__(self, metric_key: str, total: int):
        self.metric_key = metric_key
        self.total = total
        self.started = time.time()

    def _line(self, trials, trial, text: str) -> None:
        done = sum(t.status in ("TERMINATED", "ERROR") for t in trials)
        params = ", ".join(f"{k}={_short(v)}" for k, v in (trial.evaluated_params or {}).items())
        elapsed = time.time() - self.started
        print(f"[{done}/{self.total} done, {elapsed:5.0f}s] {trial.trial_id} {text}" + (f"  ({params})" if params else ""),
              file=sys.stdout, flush=True)

    def __setstate__(self, state):  # a resumed sweep measures its own time
        self.__dict__.update(state, started=time.time())

    def on_trial_start(self, iteration, trials, trial, **info):
        self._line(trials, trial, "started")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        score = (result.get("valid") or {}).get(self.metric_key, result.get(f"valid/{self.metric_key}", math.nan))
        if result.get("finished"):
            test = (result.get("test") or {}).get(self.metric_key, result.get(f"test/{self.metric_key}", math.nan))
            self._line(trials, trial, f"best epoch {result.get('best_epoch')}: valid {self.metric_key}={score:.4f} "
                                      f"test {self.metric_key}={test:.4f}")
        else:
            self._line(trials, trial, f"epoch {result.get('epoch')}: valid {self.metric_key}={score:.4f}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        if not (trial.last_result or {}).get("finished"):
            self._line(trials, trial, f"stopped by the scheduler after epoch {(trial.last_result or {}).get('epoch')}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._line(trials, trial, f"FAILED (see {trial.path}/error.txt)")
