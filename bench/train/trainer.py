"""The shared trainer: one loop for every loss, driven only by what the loss declares."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from bench.data.recall_ks import recall_ks
from bench.models.embed import embed, embedding_loader
from bench.models.embedding import build_model
from bench.protocols import get_protocol
from bench.runs import store, weights
from bench.runs.config import RunConfig
from bench.train.checkpoint import checkpoint_bytes, fresh_progress, load_checkpoint
from bench.train.compute import Compute
from bench.train.distributed import (
    decided_by_main,
    gather_batch,
    ranks_from_env,
    share_state,
    wait_for_main,
    wrap_model,
)
from bench.train.evaluations import evaluations_of
from bench.train.guards import (
    Diverged,
    DivergedAtStart,
    StepLosses,
    diverged_hint,
    epoch_seed,
    epoch_summary,
    widen_steps,
)
from bench.train.loaders import epoch_loader, load_data, raised_m_note, train_loader
from bench.train.optimizers import make_optimizer, optimizer_text
from bench.train.precision import Precision
from bench.train.preflight import check_run
from bench.train.recipes import Recipe
from bench.train.run_evaluation import checkpoint_metrics, validation_metrics
from bench.train.run_record import config_record, note, trained_summary, write_metrics
from bench.train.tracking import RunLog, open_run_log
from bench.train.untrained import untrained_metrics
from bench.util.atomic import atomic_write_json, background_writes
from bench.util.batches import to_inputs
from bench.util.progress import log
from bench.util.runtime import deterministic_cpu, seed_everything
from losses import build_loss

SYNC_EVERY = 50  # steps between reads of the training loss from a GPU


class Trainer:
    """Trains one configuration into its run folder, resuming from its last checkpoint."""

    def __init__(self, cfg: RunConfig, run_dir: Path, compute: Compute):
        self.cfg = cfg
        self.testing = True
        self.run_dir = Path(run_dir)
        self.name = cfg.run_id()  # also when it trains in a staging folder (run --force)
        # Where it trains and searches, as its command resolved --device: never resolved here.
        self.compute = compute
        self.device = self.compute.device
        self.ranks = ranks_from_env(self.device)
        self.ks = recall_ks(cfg.dataset)  # the data set's Recall@K
        self.loader = None  # the training batches' loader, made at the first epoch
        self.loaders: dict[int, DataLoader] = {}  # each split's embedding loader, by id
        self.run_log = RunLog()  # the experiment log (--log) while fit() runs
        seed_everything(cfg.seed)
        log.info(f"{self.name}: loading {cfg.dataset} ({cfg.protocol} protocol)")
        self.data = load_data(cfg)
        self.protocol = get_protocol(cfg.protocol)  # what validation and test add, the score
        self.evaluations = evaluations_of(self.protocol.evaluations)
        check_run(cfg, self.data, self.ranks.world)
        self.weights = weights.current_weights_label(cfg.pretrained)  # recorded: `weights`
        counts = f"{len(self.data.train)}/{len(self.data.val)}/{len(self.data.test)}"
        log.info(
            f"{self.name}: {counts} training/validation/test items; building "
            f"{cfg.backbone} ({self.weights}) with a {cfg.dims}-d {cfg.embedding} "
            f"embedding for {cfg.loss} on {self.device}"
        )
        channels = self.data.in_channels
        self.model = build_model(
            cfg.backbone, cfg.dims, cfg.pretrained, channels, cfg.embedding, cfg.pooling, cfg.crop
        )
        self.loss = build_loss(
            cfg.loss,
            cfg.loss_params,
            memory=cfg.memory,
            num_train=len(self.data.train),
            num_classes=self.data.num_train_classes,
            dims=cfg.dims,
        )
        if raised := raised_m_note(cfg, self.loss, self.data):
            log.info(f"{self.name}: {raised}")
        self.model.to(self.device)
        self.loss.to(self.device)
        self.precision = Precision(cfg.precision, self.device)
        self.precision.prepare(self.model)
        if cfg.freeze_backbone:
            self.model.backbone.requires_grad_(False)
        self.recipe = Recipe(cfg, self.model)  # frozen batch norm, warm-up, schedule
        self.train_model = wrap_model(self.model, self.device, self.ranks)
        self.optimizer = make_optimizer(cfg, self.model, self.loss)
        self.recipe.schedule(self.optimizer)

    def optimizer_text(self) -> str:
        return optimizer_text(self.cfg, self.loss.lr_multiplier)

    def refresh(self) -> None:
        """The loss's per-epoch refresh (NNGK's bank); the first process's, sent to the others."""
        if self.ranks.main:
            with self.precision.autocast():
                split = self.data.train_eval
                emb, labels = embed(self.model, split, self.device, loader=self.loader_of(split))
            self.loss.refresh(emb.to(self.device), torch.from_numpy(labels).to(self.device))
        share_state(self.loss, self.ranks)

    def train_epoch(self, epoch: int) -> StepLosses:
        seed = epoch_seed(self.cfg, epoch)
        if self.loader is None:  # one loader for the run: its workers last every epoch
            self.loader = train_loader(self.cfg, self.loss, self.data, self.device, self.ranks)
        loader = epoch_loader(self.loader, seed)
        # The crops' randomness, on the device that makes them; each process its own.
        crops = torch.Generator(self.device).manual_seed(seed * 1_000 + self.ranks.rank)
        self.model.train()
        if self.cfg.freeze_backbone:  # no dropout or batch-norm updates in a frozen backbone
            self.model.backbone.eval()
        if self.recipe.start_epoch(epoch):  # what trains changed: DDP made again over it
            self.train_model = wrap_model(self.model, self.device, self.ranks)
        every = 1 if self.device.type == "cpu" else SYNC_EVERY
        losses = StepLosses(epoch + 1, every, self.run_log.step_losses(epoch, len(loader)))
        bar = tqdm(loader, desc=f"epoch {epoch + 1}", leave=False, disable=len(loader) < 50)
        for x, y, idx in bar:
            x = self.precision.inputs(to_inputs(self.data.train, x, self.device, crops))
            y, idx = y.to(self.device, non_blocking=True), idx.to(self.device, non_blocking=True)
            with self.precision.autocast():
                out = self.train_model(x)
            emb, y, idx = gather_batch(out.float(), y, idx, self.ranks)  # the loss in fp32
            value = self.loss(emb, y, idx if self.loss.needs_indices else None)
            losses.add(value)  # stops before the step spoils the weights (on a CPU)
            self.optimizer.zero_grad(set_to_none=True)
            if value.requires_grad:
                self.precision.step(value, self.optimizer)
        losses.mean()  # reads the losses of the last steps
        return losses

    def embed_split(self, split: Dataset) -> tuple[np.ndarray, np.ndarray]:
        normalize, loader = self.loss.normalize_embeddings, self.loader_of(split)
        with self.precision.autocast():
            emb, labels = embed(self.model, split, self.device, normalize, loader=loader)
        return emb.numpy(), labels

    def loader_of(self, split: Dataset) -> DataLoader:
        """The split's embedding loader, made once: the refresh and validation embed theirs
        every epoch, and new loader workers each time cost a short GPU epoch a large share."""
        if id(split) not in self.loaders:
            self.loaders[id(split)] = embedding_loader(split, self.device, self.cfg.workers)
        return self.loaders[id(split)]

    def validate(self, epoch: int) -> dict:
        """`run_evaluation.validation_metrics`: with `score`, to select the checkpoint by."""
        return validation_metrics(self, epoch)

    def start_or_resume(self) -> dict:
        """The progress so far: from the last checkpoint, or a fresh start."""
        ckpt_path = self.run_dir / store.CHECKPOINT
        if ckpt_path.is_file():
            state = load_checkpoint(
                ckpt_path,
                self.device,
                self.model,
                self.loss,
                self.optimizer,
                self.precision.scaler,
                self.recipe.scheduler,
            )
            epoch = state["progress"]["epoch"]
            log.info(f"{self.name}: resuming after epoch {epoch} of {self.cfg.epochs}")
            return state["progress"]
        if self.ranks.main:
            atomic_write_json(self.run_dir / store.CONFIG, config_record(self))
        # The network before any metric training (the report reads its MAP@R: no k-means).
        if not (self.testing and self.ranks.main):
            return fresh_progress({})
        log.info(f"{self.name}: evaluating the untrained network on the test split")
        return fresh_progress(untrained_metrics(self))  # shared by the runs of one network

    def fit(self, test: bool = True) -> dict:
        """Train (or resume), select the checkpoint on validation, evaluate it on test; without
        `test` (a tuning trial), record the validation score only: the test split is never
        embedded."""
        self.testing = test
        progress = self.start_or_resume()
        # Checkpoints are written in the background: a slow disk's write overlaps the next epoch.
        run_log = open_run_log(self.cfg.log if self.ranks.main else "none", self.run_dir, self.cfg)
        exact = deterministic_cpu(self.device)  # the same run on any CPU thread count (issue 69)
        with run_log as self.run_log, background_writes() as self.writes, exact:
            return self.train_epochs(progress)

    def train_epochs(self, progress: dict) -> dict:
        """The epochs left, then the run's conclusion (`conclude`)."""
        cfg = self.cfg
        for epoch in range(progress["epoch"], cfg.epochs):
            t0 = time.perf_counter()
            seed_everything(epoch_seed(cfg, epoch))
            interval = self.loss.refresh_interval
            if interval and epoch % interval == 0:
                self.refresh()
            try:
                steps = self.train_epoch(epoch)
                val = self.shared_validation(epoch + 1)
            except Diverged as where:
                return self.stop_diverged(progress, where)
            widen_steps(progress, steps)
            if val["score"] > progress["best"]["score"]:
                progress["best"] = {
                    "score": val["score"],
                    "epoch": epoch + 1,
                    "model": copy.deepcopy(self.model.state_dict()),
                }
            row = {"epoch": epoch + 1, "train_loss": steps.mean()}
            row.update({f"val_{k}": v for k, v in val.items() if k != "score"})
            row.update(self.loss.epoch_stats())
            if epoch + 1 == cfg.epochs:  # how training ended: early epochs may look flat
                note(self.name, progress, self.loss.warnings())
            row["seconds"] = time.perf_counter() - t0
            progress["history"].append(row)
            progress["epoch"] = epoch + 1
            log.info(epoch_summary(self.name, row, cfg.epochs, val["score"]))
            self.run_log.epoch(row, self.optimizer)
            self.recipe.end_epoch()
            if self.ranks.main:  # the checkpoint, then a history never ahead of it
                state = checkpoint_bytes(
                    self.model,
                    self.loss,
                    self.optimizer,
                    progress,
                    self.precision.scaler,
                    self.recipe.scheduler,
                )
                history = store.history_csv(progress["history"])
                self.writes.write(
                    (self.run_dir / store.CHECKPOINT, state),
                    (self.run_dir / store.HISTORY, history),
                )
        return self.conclude(progress)

    def shared_validation(self, epoch: int) -> dict:
        """`validate` on the first process; the others take its result (or its divergence)."""
        return decided_by_main(lambda: self.validate(epoch), self.ranks, Diverged)

    def conclude(self, progress: dict) -> dict:
        """The run's metrics.json (`run_record.write_metrics`): tested (`finish`), or a tuning
        trial's validation score; written by the first process, which the others wait for."""
        metrics = {}
        if self.ranks.main:
            metrics = self.finish(progress) if self.testing else trained_summary(self, progress)
            metrics = write_metrics(self, progress, metrics)
        wait_for_main(self.ranks)
        return metrics

    def stop_diverged(self, progress: dict, where: Diverged) -> dict:
        """Training went non-finite: finish with the best epoch so far, recording where it
        diverged; with no finished epoch there is nothing to keep, and an error says so."""
        hint = diverged_hint(self.cfg.lr, self.cfg.loss_params)
        if progress["best"]["model"] is None:
            raise DivergedAtStart(
                f"{self.name}: training diverged at {where} before any epoch finished; {hint}"
            )
        progress["diverged"] = str(where)
        log.warning(
            f"{self.name}: training diverged at {where}; stopped, testing the best epoch so far "
            f"({progress['best']['epoch']}); {hint}"
        )
        return self.conclude(progress)

    def finish(self, progress: dict) -> dict:
        """The chosen checkpoint tested (`run_evaluation.checkpoint_metrics`), with the run's
        settings (`run_record.trained_summary`)."""
        best = progress["best"]
        log.info(f"{self.name}: testing the checkpoint of epoch {best['epoch']}")
        if best["model"] is not None:
            self.model.load_state_dict(best["model"])
        metrics = checkpoint_metrics(self, best["epoch"])
        return {**metrics, **trained_summary(self, progress)}
