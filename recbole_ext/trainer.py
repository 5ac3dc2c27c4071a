"""RecBole's trainer loop, plus: named loss terms, per-epoch history (with the model's
``training_statistics()``, e.g. Rec-Denoiser's mask sparsity), bf16 autocast, ``compile``,
length-bucketed batches (``length_bucketing``, ``data/bucketing.py``), a faster evaluation
collector (:class:`OnePositiveCollector`), sampled evaluation that scores each history once for
RecBole's models too (``models/repeated_rows.py``), a run directory, and after every epoch the
state a killed run resumes from (:mod:`recbole_ext.resume`).

:func:`trainer_class` puts :class:`RunTrainerMixin` in front of whatever trainer RecBole would
use for a model (``Trainer`` for sequential models), so early stopping, evaluation and metrics
stay RecBole's. Safe and unique checkpoints come from :mod:`recbole_ext.compat`.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import torch
from recbole.evaluator.collector import Collector
from recbole.utils import EvaluatorType, get_trainer
from torch.nn.utils import clip_grad_norm_
from tqdm import tqdm

from recbole_ext import compat, devices
from recbole_ext.compat import atomic_write_bytes
from recbole_ext.data.bucketing import BucketedEpoch
from recbole_ext.errors import RecboleExtError
from recbole_ext.metrics import USER_RESOURCE
from recbole_ext.models.repeated_rows import candidate_fields, candidate_scores_from_full_sort
from recbole_ext.resume import RESUME_FILE, save_resume_state


class TrainingDiverged(RecboleExtError):
    """The loss became NaN: reported in one line, and the run directory says ``failed``."""


def write_json(path: Path, payload: Any) -> None:
    """Atomic JSON write (a killed run never leaves a truncated file)."""
    data = (json.dumps(payload, indent=2, default=float) + "\n").encode()
    atomic_write_bytes(path, lambda handle: handle.write(data))


def loss_names_of(model, count: int) -> tuple[str, ...]:
    names = tuple(getattr(model, "loss_names", ()) or ())
    return names if len(names) == count else tuple(f"loss{i + 1}" for i in range(count))


class OnePositiveCollector(Collector):
    """RecBole's evaluation collector with a fast path for full-sort batches that have exactly one
    positive per row (sequential leave-one-out): RecBole marks positives in a dense int matrix of
    batch × items (200 MB for 4,096 users × 12k Beauty items), sums it and gathers from it; here
    the same ``rec.topk`` rows come from comparing the top-k ids with the target. Everything else,
    and every other batch shape, is RecBole's code. It also keeps each row's user id when a metric
    of :mod:`recbole_ext.metrics` needs it (``SampleGAUC``)."""

    def eval_batch_collect(self, scores_tensor, interaction, positive_u, positive_i):
        if self.register.need(USER_RESOURCE):
            self.data_struct.update_tensor(USER_RESOURCE, interaction[self.config["USER_ID_FIELD"]])
        self._collect_rankings(scores_tensor, interaction, positive_u, positive_i)

    def get_data_struct(self):
        returned = super().get_data_struct()
        if USER_RESOURCE in self.data_struct:  # per evaluation, like RecBole's own per-row resources
            del self.data_struct[USER_RESOURCE]
        return returned

    def _collect_rankings(self, scores_tensor, interaction, positive_u, positive_i):
        rows = scores_tensor.size(0) if scores_tensor.dim() == 2 else -1
        if not (self.register.need("rec.topk") and positive_u.numel() == rows
                and torch.equal(positive_u, torch.arange(rows, device=positive_u.device))):
            return super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        top_items = torch.topk(scores_tensor, max(self.topk), dim=-1).indices
        hits = (top_items == positive_i.to(top_items.device)[:, None]).int()
        self.data_struct.update_tensor("rec.topk", torch.cat((hits, torch.ones_like(hits[:, :1])), dim=1))
        if self.register.need("rec.items"):
            self.data_struct.update_tensor("rec.items", top_items)
        skipped = {key: self.register.need(key) for key in ("rec.topk", "rec.items")}
        for key in skipped:
            setattr(self.register, key, False)
        try:  # the remaining resources (scores, mean rank, labels), if any metric needs them
            super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        finally:
            for key, value in skipped.items():
                setattr(self.register, key, value)


class RunTrainerMixin:
    """Goes before a RecBole trainer class in the MRO; see the module docstring."""

    def __init__(self, config, model, run_dir: Path | None = None):
        super().__init__(config, model)
        self.bf16 = bool(config["bf16"]) if "bf16" in config else False
        on_cpu = torch.device(self.device).type == "cpu"
        if on_cpu and compat.flush_denormals_missed_threads():
            self.logger.warning("some of torch's CPU threads compute on subnormal floats (torch ran a parallel "
                                "operation before recbole_ext was imported): weights that decay towards zero can "
                                "then slow training many times over (benchmarks/denormals.py); import "
                                "recbole_ext before any torch operation")
        if self.bf16 and on_cpu:
            if devices.cpu_lacks_bf16_kernels():
                self.logger.warning("bf16=true: this CPU has no bf16 matrix kernels (oneDNN needs AVX-512), so bfloat16 "
                                    "autocast trains many times slower than fp32 here (docs/performance.md); "
                                    "bf16=false trains faster")
            elif type(model).__name__ in devices.CPU_FP32_MODELS:
                self.logger.warning(f"bf16=true: bfloat16 autocast slows {type(model).__name__} down on a CPU instead of "
                                    f"speeding it up (docs/performance.md); bf16=false trains it faster")
        self.length_bucketing = int(config["length_bucketing"] or 0) if "length_bucketing" in config else 0
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # checked at resolve time: sequential model, full-sort evaluation
        self.masked_history_field = (config["ITEM_ID_FIELD"] + config["LIST_SUFFIX"]
                                     if "eval_mask_history" in config and config["eval_mask_history"] else None)
        self.history: list[dict[str, Any]] = []
        self.eval_collector = OnePositiveCollector(config)
        # None: not checked yet (see _neg_sample_batch_eval)
        self.scores_each_history_once: bool | None = (
            None if config["eval_type"] == EvaluatorType.RANKING
            and not getattr(model, "encodes_each_history_once", False) else False)
        self._candidate_fields = candidate_fields(None, config)  # evaluate() adds the loader's item features
        # Compiled once; trimmed batches vary in length, which costs a few recompiles (docs/performance.md).
        compiled = "compile" in config and config["compile"]
        self.training_loss = torch.compile(model.calculate_loss) if compiled else model.calculate_loss
        if self.run_dir is not None:
            self.saved_model_file = str(self.run_dir / "model.pth")
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.resume_fingerprint: str | None = None  # set by keep_resume_state: no resume.pth without it
        self._validates = False
        self._train_loader = None

    def keep_resume_state(self, fingerprint: str, since: float, elapsed_before_s: float = 0.0) -> None:
        """Write ``resume.pth`` after every epoch; ``since``/``elapsed_before_s`` give the run's wall time."""
        self.resume_fingerprint = fingerprint
        self._clock = (since, elapsed_before_s)

    def _save_resume_state(self, epoch_idx: int) -> None:
        if self.run_dir is None or self.resume_fingerprint is None:
            return
        since, before = self._clock
        save_resume_state(self.run_dir / RESUME_FILE, self, self._train_loader, self.resume_fingerprint,
                          before + time.time() - since, epoch_idx)

    def fit(self, train_data, valid_data=None, verbose=True, saved=True, show_progress=False, callback_fn=None):
        """RecBole's ``fit``; the resume state is written once an epoch is validated and its best
        checkpoint saved (before ``callback_fn``, which may end the process: a sweep's scheduler)."""
        self._train_loader = train_data
        self._validates = bool(valid_data) and self.eval_step > 0

        def after_validation(epoch_idx, valid_score):
            self._save_resume_state(epoch_idx)
            if callback_fn is not None:
                callback_fn(epoch_idx, valid_score)

        return super().fit(train_data, valid_data, verbose=verbose, saved=saved, show_progress=show_progress,
                           callback_fn=after_validation)

    def _full_sort_batch_eval(self, batched_data):
        """RecBole's full-sort scores; with ``eval_mask_history`` the items of each row's input window
        also score -inf (HLLM's evaluation, specs/cape.md §3.3), one scatter per batch. Padding ids
        are 0, which RecBole already sets to -inf."""
        interaction, scores, positive_u, positive_i = super()._full_sort_batch_eval(batched_data)
        if self.masked_history_field is not None:
            window = interaction[self.masked_history_field].to(scores.device)
            scores.scatter_(1, window, float("-inf"))
        return interaction, scores, positive_u, positive_i

    def _neg_sample_batch_eval(self, batched_data):
        """RecBole's sampled-evaluation batch (``uni100``, ``pop100``), whose ``predict`` encodes a
        user's history once per candidate. A model that does not avoid that itself gets its
        candidates' scores from one ``full_sort_predict`` per history (models/repeated_rows.py) once
        they have matched its ``predict`` on the first batch; where they differ, or the model has
        no ``full_sort_predict``, evaluation stays RecBole's row by row."""
        if self.scores_each_history_once is False:
            return super()._neg_sample_batch_eval(batched_data)
        wrapped = vars(self.model).get("predict")  # an instance's own wrapper (a profiler's), kept
        self.model.predict = self._predict_each_history_once  # what RecBole's method calls, per chunk
        try:
            return super()._neg_sample_batch_eval(batched_data)
        finally:
            if wrapped is None:
                del self.model.predict
            else:
                self.model.predict = wrapped

    def _predict_each_history_once(self, interaction):
        row_by_row = type(self.model).predict.__get__(self.model)
        try:
            scores = candidate_scores_from_full_sort(self.model, interaction, *self._candidate_fields)
        except NotImplementedError:
            self.scores_each_history_once, scores = False, None
        if scores is None:
            return row_by_row(interaction)
        if self.scores_each_history_once is None:
            checked = torch.arange(min(len(interaction), 512), device=scores.device)
            self.scores_each_history_once = torch.allclose(scores[checked], row_by_row(interaction[checked]),
                                                           rtol=1e-4, atol=1e-5)
            if not self.scores_each_history_once:
                self.logger.warning(f"{type(self.model).__name__}: full_sort_predict's scores differ from predict's; "
                                    "sampled evaluation encodes each row")
                return row_by_row(interaction)
        return scores

    def autocast(self):
        """bf16 autocast for ``bf16: true``; RecBole's ``enable_amp`` (fp16 on CUDA) keeps working."""
        if self.bf16:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        if self.enable_amp:
            return torch.autocast(device_type=self.device.type)
        return contextlib.nullcontext()

    def _check_nan(self, loss):
        if torch.isnan(loss):
            raise TrainingDiverged(
                f"training loss is NaN in epoch {len(self.history)}; lower learning_rate or set clip_grad_norm"
            )

    def _train_epoch(self, train_data, epoch_idx, loss_func=None, show_progress=False):
        """RecBole's epoch, with per-term sums kept on device (no host sync per step) and bf16."""
        self.model.train()
        begin = getattr(self.model, "start_training_epoch", None)  # parts that refresh per epoch (SeqTransformer)
        if callable(begin):
            begin(epoch_idx)
        loss_func = loss_func or self.training_loss
        if self.length_bucketing:
            train_data = BucketedEpoch(train_data, self.length_bucketing, self.config["ITEM_LIST_LENGTH_FIELD"])
        batches = (
            tqdm(train_data, total=len(train_data), ncols=100, desc=f"Train {epoch_idx:>5}")
            if show_progress else train_data
        )
        totals = None
        scaler = torch.amp.GradScaler(self.device.type, enabled=self.enable_scaler)
        started = time.perf_counter()
        for interaction in batches:
            interaction = interaction.to(self.device)
            self.optimizer.zero_grad()
            with self.autocast():
                losses = loss_func(interaction)
            terms = losses if isinstance(losses, tuple) else (losses,)
            loss = sum(terms)
            self._check_nan(loss)
            scaler.scale(loss).backward()
            if self.clip_grad_norm:
                scaler.unscale_(self.optimizer)
                clip_grad_norm_(self.model.parameters(), **self.clip_grad_norm)
            scaler.step(self.optimizer)
            scaler.update()
            detached = torch.stack([term.detach().float() for term in terms])
            totals = detached if totals is None else totals + detached
        sums = tuple(totals.tolist()) if totals is not None else (0.0,)
        names = loss_names_of(self.model, len(sums)) if len(sums) > 1 else ("loss",)
        entry = {"epoch": epoch_idx, "train_time_s": time.perf_counter() - started,
                 "train_loss": dict(zip(names, sums))}
        if len(sums) > 1:
            entry["train_loss"]["total"] = sum(sums)
        collect = getattr(self.model, "training_statistics", None)  # per-part diagnostics (SeqTransformer)
        statistics = collect() if callable(collect) else None
        if statistics:
            entry["statistics"] = statistics
            for name, values in statistics.items():
                self.logger.info(f"epoch {epoch_idx} {name}: " + ", ".join(f"{key} {value:.4g}" for key, value in values.items()))
        self.history.append(entry)
        self._write_history()
        if not (self._validates and (epoch_idx + 1) % self.eval_step == 0):  # else after validation
            self.train_loss_dict[epoch_idx] = sum(sums)  # RecBole sets it after this returns
            self._save_resume_state(epoch_idx)
        return sums if len(sums) > 1 else sums[0]

    def _generate_train_loss_output(self, epoch_idx, s_time, e_time, losses):
        if not isinstance(losses, tuple):
            return super()._generate_train_loss_output(epoch_idx, s_time, e_time, losses)
        places = self.config["loss_decimal_place"] or 4
        terms = ", ".join(f"{name}: {value:.{places}f}" for name, value in zip(loss_names_of(self.model, len(losses)), losses))
        return f"epoch {epoch_idx} training [time: {e_time - s_time:.2f}s, train loss: {sum(losses):.{places}f} ({terms})]"

    def _add_train_loss_to_tensorboard(self, epoch_idx, losses, tag="Loss/Train"):
        if not isinstance(losses, tuple):
            return super()._add_train_loss_to_tensorboard(epoch_idx, losses, tag)
        for name, value in zip(loss_names_of(self.model, len(losses)), losses):
            self.tensorboard.add_scalar(f"{tag}/{name}", value, epoch_idx)
        self.tensorboard.add_scalar(f"{tag}/total", sum(losses), epoch_idx)

    def evaluate(self, eval_data, *args, **kwargs):
        # The loader's dataset says which item features its sampled rows join in for the candidate.
        self._candidate_fields = candidate_fields(getattr(eval_data, "_dataset", None), self.config)
        return super().evaluate(eval_data, *args, **kwargs)

    def _valid_epoch(self, valid_data, show_progress=False):
        started = time.perf_counter()
        valid_score, valid_result = super()._valid_epoch(valid_data, show_progress=show_progress)
        if self.history:
            self.history[-1].update(
                valid_score=float(valid_score),
                valid={k: float(v) for k, v in valid_result.items()},
                valid_time_s=time.perf_counter() - started,
            )
            self._write_history()
        return valid_score, valid_result

    def _write_history(self) -> None:
        if self.run_dir is not None:
            write_json(self.run_dir / "history.json", self.history)


def trainer_class(config) -> type:
    """RecBole's trainer for this model, with :class:`RunTrainerMixin` in front."""
    base = get_trainer(config["MODEL_TYPE"], config["model"])
    return type(f"Run{base.__name__}", (RunTrainerMixin, base), {})
