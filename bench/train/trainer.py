"""The shared trainer: one loop for every loss, driven only by what the loss declares."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from bench.data.datasets import query_flags
from bench.data.recall_ks import recall_ks
from bench.evaluation.health import embedding_health
from bench.evaluation.metrics import Scores, evaluate
from bench.evaluation.retrieval import distance_fault
from bench.models.embed import embed, embedding_loader
from bench.models.embedding import build_model
from bench.protocols import get_protocol
from bench.runs import store, weights
from bench.runs.config import RunConfig
from bench.train.baseline import run_summary
from bench.train.checkpoint import checkpoint_bytes, fresh_progress, load_checkpoint
from bench.train.distributed import (
    gather_batch,
    local_device,
    ranks_from_env,
    share_from_main,
    wrap_model,
)
from bench.train.evaluations import evaluations_of, retrieval_scores
from bench.train.guards import (
    Diverged,
    DivergedAtStart,
    StepLosses,
    ending_warnings,
    epoch_seed,
    epoch_summary,
    widen_steps,
)
from bench.train.loaders import (
    epoch_loader,
    input_size,
    load_data,
    raised_m_note,
    sampler_text,
    split_counts,
    train_loader,
)
from bench.train.optimizers import make_optimizer, optimizer_text
from bench.train.precision import Precision
from bench.train.preflight import check_run
from bench.train.recipes import Recipe
from bench.train.tracking import RunLog, open_run_log
from bench.train.untrained import untrained_metrics
from bench.util.atomic import atomic_write_json, background_writes
from bench.util.batches import to_inputs
from bench.util.progress import log
from bench.util.runtime import default_device, deterministic_cpu, package_versions, seed_everything
from bench.util.torch_knn import search_device
from losses import build_loss, loss_defaults

SYNC_EVERY = 50  # steps between reads of the training loss from a GPU


class Trainer:
    """Trains one configuration into its run folder, resuming from its last checkpoint."""

    def __init__(self, cfg: RunConfig, run_dir: Path, device: torch.device | None = None):
        self.cfg = cfg
        self.testing = True
        self.run_dir = Path(run_dir)
        self.name = cfg.run_id()  # also when it trains in a staging folder (run --force)
        self.device = device or default_device()
        self.ranks = ranks_from_env(self.device)
        self.device = local_device(self.device)
        # Where kNN searches (None: faiss on the CPU), and the data set's Recall@K.
        self.search = {"device": search_device(self.device), "ks": recall_ks(cfg.dataset)}
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
        self.model = build_model(
            cfg.backbone, cfg.dims, cfg.pretrained, self.data.in_channels, cfg.embedding,
            cfg.pooling, cfg.crop,
        )  # fmt: skip
        self.loss = build_loss(
            cfg.loss,
            cfg.loss_params,
            memory=cfg.memory,
            num_train=len(self.data.train),
            num_classes=self.data.num_train_classes,
            dims=cfg.dims,
        )
        if note := raised_m_note(cfg, self.loss, self.data):
            log.info(f"{self.name}: {note}")
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

    def config_record(self) -> dict:
        params = {**loss_defaults(self.cfg.loss), **self.cfg.loss_params}
        return {
            **self.cfg.to_dict(),
            "run_id": self.name,
            "weights": self.weights,
            "resolved_loss_params": params,
            "versions": {**package_versions(), **self.data.packages},
            "device": str(self.device),
            "torch_threads": torch.get_num_threads(),  # a CPU run's bits depend on it (README)
        }

    def refresh(self) -> None:
        """The loss's per-epoch refresh (NNGK's bank); the first process's, sent to the others."""
        if self.ranks.main:
            with self.precision.autocast():
                split = self.data.train_eval
                emb, labels = embed(self.model, split, self.device, loader=self.loader_of(split))
            self.loss.refresh(emb.to(self.device), torch.from_numpy(labels).to(self.device))
        if self.ranks.world > 1:
            state = {k: v.cpu() for k, v in self.loss.state_dict().items()}
            self.loss.load_state_dict(share_from_main(state, self.ranks))

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
        """Validation metrics with what the protocol's evaluations add, and `score` (higher is
        better) to select the checkpoint by, as the protocol declares it; the epoch itself
        without a validation split."""
        if not len(self.data.val):  # --val-fraction 0: every epoch beats the one before
            return {"score": float(epoch)}
        emb, labels = self.embed_split(self.data.val)
        fault = distance_fault(emb)
        if fault:
            raise Diverged(epoch, f"validation embeddings: {fault}", float("nan"))
        metrics = evaluate(emb, labels, seed=self.cfg.seed, clustering=False, **self.search).metrics
        for evaluation in self.evaluations:
            metrics.update(evaluation.validate(self, emb, labels))
        metrics["score"] = self.protocol.score_of(metrics)
        return metrics

    def test(
        self, write_tables: bool = False, clustering: str = ""
    ) -> tuple[dict, np.ndarray, np.ndarray, Scores]:
        """Test metrics, searched as the protocol searches (with a gallery: the test split's
        queries in its gallery), with what the protocol's evaluations add (`write_tables`: their
        tables into the run folder); the test embeddings and labels, and each query's scores.
        `clustering`: which NMI (default: the run's)."""
        emb, labels = self.embed_split(self.data.test)
        queries = query_flags(self.data.test)
        clustering = clustering or self.cfg.clustering
        metrics, scores = retrieval_scores(
            self.protocol, emb, labels, queries, self.cfg.seed, clustering, **self.search
        )
        for evaluation in self.evaluations:
            metrics.update(evaluation.test(self, emb, labels, write_tables))
        return metrics, emb, labels, scores

    def start_or_resume(self) -> dict:
        """The progress so far: from the last checkpoint, or a fresh start."""
        ckpt_path = self.run_dir / store.CHECKPOINT
        if ckpt_path.is_file():
            state = load_checkpoint(
                ckpt_path, self.device, self.model, self.loss, self.optimizer,
                self.precision.scaler, self.recipe.scheduler,
            )  # fmt: skip
            epoch = state["progress"]["epoch"]
            log.info(f"{self.name}: resuming after epoch {epoch} of {self.cfg.epochs}")
            return state["progress"]
        if self.ranks.main:
            atomic_write_json(self.run_dir / store.CONFIG, self.config_record())
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
                self.note(progress, self.loss.warnings())
            row["seconds"] = time.perf_counter() - t0
            progress["history"].append(row)
            progress["epoch"] = epoch + 1
            log.info(epoch_summary(self.name, row, cfg.epochs, val["score"]))
            self.run_log.epoch(row, self.optimizer)
            self.recipe.end_epoch()
            if self.ranks.main:  # the checkpoint, then a history never ahead of it
                state = checkpoint_bytes(
                    self.model, self.loss, self.optimizer, progress,
                    self.precision.scaler, self.recipe.scheduler,
                )  # fmt: skip
                history = store.history_csv(progress["history"])
                self.writes.write(
                    (self.run_dir / store.CHECKPOINT, state),
                    (self.run_dir / store.HISTORY, history),
                )
        return self.conclude(progress)

    def shared_validation(self, epoch: int) -> dict:
        """`validate` on the first process; the others take its result (or its divergence)."""
        if self.ranks.world == 1:
            return self.validate(epoch)
        outcome = None
        if self.ranks.main:
            try:
                outcome = self.validate(epoch)
            except Diverged as where:
                outcome = (where.epoch, where.step, where.value)
        outcome = share_from_main(outcome, self.ranks)
        if isinstance(outcome, tuple):
            raise Diverged(*outcome)
        return outcome

    def conclude(self, progress: dict) -> dict:
        """The run's metrics.json: tested (`finish`), or a tuning trial's validation score;
        written by the first process, which the others wait for."""
        metrics = {}
        if self.ranks.main:
            metrics = self.finish(progress) if self.testing else self.finish_validation(progress)
        if self.ranks.world > 1:
            torch.distributed.barrier()
        return metrics

    def note(self, progress: dict, warnings: list[str]) -> None:
        """Log each new warning once, and keep it for metrics.json."""
        kept = progress.setdefault("warnings", [])
        for text in warnings:
            if text not in kept:
                log.warning(f"{self.name}: {text}")
                kept.append(text)

    def stop_diverged(self, progress: dict, where: Diverged) -> dict:
        """Training went non-finite: finish with the best epoch so far, recording where it
        diverged; with no finished epoch there is nothing to keep, and an error says so."""
        hint = f"a learning rate below {self.cfg.lr:g} (--lr) may train"
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

    def finish_validation(self, progress: dict) -> dict:
        """A tuning trial's metrics.json: its best validation score and its settings."""
        summary = run_summary(
            self.cfg,
            best_epoch=progress["best"]["epoch"],
            optimizer=self.optimizer_text(),
            weights=self.weights,
        )
        return self.write_metrics(progress, summary)

    def write_metrics(self, progress: dict, metrics: dict) -> dict:
        """metrics.json, written last: `metrics` with how training went (the validation score
        of the chosen epoch, where it diverged, the loss's trend, the warnings)."""
        metrics["val_score"] = progress["best"]["score"]
        if "diverged" in progress:
            metrics["diverged"] = progress["diverged"]
        trend, warnings = ending_warnings(progress, metrics, self.cfg.lr)
        self.note(progress, warnings)
        metrics.update(trend)
        metrics["warnings"] = progress.get("warnings", [])
        self.writes.wait()  # the last checkpoint on disk (or its error) before the run is done
        atomic_write_json(self.run_dir / store.METRICS, metrics)
        return metrics

    def finish(self, progress: dict) -> dict:
        best = progress["best"]
        log.info(f"{self.name}: testing the checkpoint of epoch {best['epoch']}")
        if best["model"] is not None:
            self.model.load_state_dict(best["model"])
        metrics, emb, labels, scores = self.test(write_tables=True)
        metrics.update(embedding_health(emb, labels, self.cfg.seed, self.search["device"]))
        self.run_log.test(metrics, best["epoch"])
        store.save_test_embeddings(self.run_dir, emb, labels, scores, query_flags(self.data.test))
        train, train_labels = self.embed_split(self.data.train_eval)  # for the visualisations
        store.save_train_embeddings(self.run_dir, train, train_labels)
        # R@K, MAP@R on the training split: how far test falls from it (Liu et al. 2019, Table 1)
        train_metrics = evaluate(
            train, train_labels, seed=self.cfg.seed, clustering=False, **self.search
        ).metrics
        metrics.update({f"train_{key}": value for key, value in train_metrics.items()})
        metrics.update(
            run_summary(
                self.cfg,
                best_epoch=best["epoch"],
                optimizer=self.optimizer_text(),
                weights=self.weights,
                untrained_network=progress["untrained_network"],
                loss_params={**loss_defaults(self.cfg.loss), **self.cfg.loss_params},
                input_size=input_size(self.data),
                sampler=sampler_text(self.cfg, self.loss, self.data),
                split_counts=split_counts(self.data),
                processes=self.ranks.world,
            )
        )
        return self.write_metrics(progress, metrics)
