"""The shared trainer: one loop for every loss, driven only by what the loss declares."""

from __future__ import annotations

import copy
import platform
import random
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pytorch_metric_learning.samplers import MPerClassSampler
from torch.utils.data import DataLoader, Dataset, RandomSampler
from tqdm import tqdm

from bench import store
from bench.backbones import build_model
from bench.config import RunConfig
from bench.data import DataSplits, load_dataset
from bench.evaluate import evaluate
from bench.scoring import classification_scores, pair_report, pair_scores, validation_threshold
from losses import BenchLoss, build_loss, loss_defaults

SELECT_BY = "map@r"  # validation metric that picks the checkpoint
PACKAGES = ("torch", "torchvision", "pytorch-metric-learning", "faiss-cpu", "numpy", "nngk-bench")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(cfg: RunConfig, epoch: int) -> int:
    """Every epoch's randomness derives from the run seed and the epoch alone, so that a run
    resumed at an epoch boundary continues exactly as an uninterrupted one."""
    return cfg.seed * 100_003 + epoch


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


@torch.no_grad()
def embed(
    model: torch.nn.Module,
    dataset: Dataset,
    device: torch.device,
    normalize: bool = False,
    features: bool = False,
    workers: int = 0,
) -> tuple[torch.Tensor, np.ndarray]:
    """Embeddings (or the backbone's `features`) of a whole split in eval mode, in order."""
    model.eval()
    forward = model.features if features else model
    loader = DataLoader(dataset, batch_size=256, shuffle=False, num_workers=workers)
    out = [forward(x.to(device)).float().cpu() for x, _, _ in loader]
    emb = torch.cat(out)
    if normalize:
        emb = F.normalize(emb, dim=1)
    return emb, np.asarray(dataset.labels)


def balanced_m(batch_size: int, m: int, num_classes: int) -> int:
    """The smallest m' >= m dividing the batch with m' * classes >= batch (MPerClassSampler)."""
    for cand in range(max(m, -(-batch_size // num_classes)), batch_size + 1):
        if batch_size % cand == 0:
            return cand
    return batch_size


def epoch_loader(cfg: RunConfig, loss: BenchLoss, data: DataSplits, seed: int) -> DataLoader:
    """A fresh loader per epoch, seeded by the epoch, so a resumed run sees the same batches."""
    labels = np.asarray(data.train.labels)
    if loss.class_balanced:
        m = balanced_m(cfg.batch_size, cfg.m_per_class, len(np.unique(labels)))
        # A new sampler each epoch: MPerClassSampler shuffles its label list in place.
        sampler = MPerClassSampler(labels, m, cfg.batch_size, length_before_new_iter=len(labels))
    else:
        gen = torch.Generator().manual_seed(seed)
        sampler = RandomSampler(data.train, generator=gen)
    return DataLoader(
        data.train,
        batch_size=cfg.batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=cfg.workers,
    )


class Trainer:
    """Trains one configuration into its run folder, resuming from its last checkpoint."""

    def __init__(self, cfg: RunConfig, run_dir: Path, device: torch.device | None = None):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.device = device or default_device()
        seed_everything(cfg.seed)
        self.data = load_data(cfg)
        self.model = build_model(
            cfg.backbone, cfg.dims, cfg.pretrained, self.data.in_channels, cfg.embedding
        )
        self.loss = build_loss(
            cfg.loss,
            cfg.loss_params,
            num_train=len(self.data.train),
            num_classes=self.data.num_train_classes,
            dims=cfg.dims,
        )
        self.model.to(self.device)
        self.loss.to(self.device)
        if cfg.freeze_backbone:
            self.model.backbone.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        params += [p for p in self.loss.parameters() if p.requires_grad]
        # Nothing to learn (frozen backbone as the embedding, fixed NNGK weights): evaluation only.
        self.optimizer = torch.optim.SGD(
            params or [torch.zeros(1, requires_grad=True)],
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
        )

    def config_record(self) -> dict:
        params = {**loss_defaults(self.cfg.loss), **self.cfg.loss_params}
        return {
            **self.cfg.to_dict(),
            "run_id": self.run_dir.name,
            "resolved_loss_params": params,
            "versions": package_versions(),
            "device": str(self.device),
        }

    def refresh(self) -> None:
        emb, labels = embed(self.model, self.data.train_eval, self.device, workers=self.cfg.workers)
        self.loss.refresh(emb.to(self.device), torch.from_numpy(labels).to(self.device))

    def train_epoch(self, epoch: int) -> float:
        loader = epoch_loader(self.cfg, self.loss, self.data, epoch_seed(self.cfg, epoch))
        self.model.train()
        if self.cfg.freeze_backbone:  # no dropout or batch-norm updates in a frozen backbone
            self.model.backbone.eval()
        total, count = 0.0, 0
        bar = tqdm(loader, desc=f"epoch {epoch + 1}", leave=False, disable=len(loader) < 50)
        for x, y, idx in bar:
            x, y = x.to(self.device), y.to(self.device)
            indices = idx.to(self.device) if self.loss.needs_indices else None
            value = self.loss(self.model(x), y, indices)
            self.optimizer.zero_grad(set_to_none=True)
            if value.requires_grad:
                value.backward()
                self.optimizer.step()
            total += float(value.detach())
            count += 1
        return total / max(count, 1)

    def embed_split(self, split: Dataset) -> tuple[np.ndarray, np.ndarray]:
        emb, labels = embed(
            self.model, split, self.device, self.loss.normalize_embeddings, workers=self.cfg.workers
        )
        return emb.numpy(), labels

    def class_probabilities(self, emb: np.ndarray) -> torch.Tensor:
        """The loss's classifier over the current training embeddings (classify protocol)."""
        train, train_labels = self.embed_split(self.data.train_eval)
        return self.loss.class_probabilities(
            torch.from_numpy(emb),
            torch.from_numpy(train),
            torch.from_numpy(train_labels),
            self.data.num_train_classes,
        )

    def validate(self) -> dict:
        """Validation metrics, with `score` (higher is better) to select the checkpoint by:
        MAP@R (metric), minus the classifier's NLL (classify), pair accuracy (pairs)."""
        emb, labels = self.embed_split(self.data.val)
        metrics = evaluate(emb, labels, seed=self.cfg.seed)
        if self.cfg.protocol == "classify":
            metrics.update(classification_scores(self.class_probabilities(emb), labels))
            metrics["score"] = -metrics["nll"]
        elif self.cfg.protocol == "pairs":
            scores, _, _ = pair_scores(emb, labels, validation_threshold(emb, labels))
            metrics["pair_accuracy"] = metrics["score"] = scores["accuracy"]
        else:
            metrics["score"] = metrics[SELECT_BY]
        return metrics

    def test(self, write_tables: bool = False) -> tuple[dict, np.ndarray, np.ndarray]:
        """Test metrics of the protocol, with the test embeddings and labels."""
        emb, labels = self.embed_split(self.data.test)
        metrics = evaluate(emb, labels, seed=self.cfg.seed)
        if self.cfg.protocol == "classify":
            metrics.update(classification_scores(self.class_probabilities(emb), labels))
        elif self.cfg.protocol == "pairs":
            val_emb, val_labels = self.embed_split(self.data.val)
            splits = {"seen": (emb, labels), "unseen": self.embed_split(self.data.unseen)}
            scores, tables = pair_report(
                splits, validation_threshold(val_emb, val_labels), self.data.class_names
            )
            metrics.update(scores)
            for name, table in tables.items() if write_tables else ():
                store.atomic_write_text(self.run_dir / f"{name}.csv", table.to_csv(index=False))
        return metrics, emb, labels

    def save_checkpoint(self, progress: dict) -> None:
        state = {
            "model": self.model.state_dict(),
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "progress": progress,
        }
        store.atomic_torch_save(self.run_dir / store.CHECKPOINT, state)

    def start_or_resume(self) -> dict:
        """The progress so far: from the last checkpoint, or a fresh start."""
        ckpt_path = self.run_dir / store.CHECKPOINT
        if ckpt_path.is_file():
            state = torch.load(ckpt_path, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.loss.load_state_dict(state["loss"])
            self.optimizer.load_state_dict(state["optimizer"])
            return state["progress"]
        store.atomic_write_json(self.run_dir / store.CONFIG, self.config_record())
        # The network before any metric training: a baseline for what training adds.
        untrained, _, _ = self.test()
        return {
            "epoch": 0,
            "history": [],
            "untrained_network": untrained,
            "best": {"score": float("-inf"), "epoch": 0, "model": None},
        }

    def fit(self) -> dict:
        """Train (or resume), select the checkpoint on validation, evaluate it on test."""
        cfg = self.cfg
        progress = self.start_or_resume()
        bar = tqdm(
            range(progress["epoch"], cfg.epochs),
            desc=self.run_dir.name,
            initial=progress["epoch"],
            total=cfg.epochs,
        )
        for epoch in bar:
            t0 = time.perf_counter()
            seed_everything(epoch_seed(cfg, epoch))
            interval = self.loss.refresh_interval
            if interval and epoch % interval == 0:
                self.refresh()
            train_loss = self.train_epoch(epoch)
            val = self.validate()
            if val["score"] > progress["best"]["score"]:
                progress["best"] = {
                    "score": val["score"],
                    "epoch": epoch + 1,
                    "model": copy.deepcopy(self.model.state_dict()),
                }
            row = {"epoch": epoch + 1, "train_loss": train_loss}
            row.update({f"val_{k}": v for k, v in val.items() if k != "score"})
            row.update(self.loss.epoch_stats())
            row["seconds"] = time.perf_counter() - t0
            progress["history"].append(row)
            progress["epoch"] = epoch + 1
            bar.set_postfix(loss=f"{train_loss:.3f}", val_score=f"{val['score']:.3f}")
            self.save_checkpoint(progress)
            history = pd.DataFrame(progress["history"]).to_csv(index=False)
            store.atomic_write_text(self.run_dir / store.HISTORY, history)
        return self.finish(progress)

    def finish(self, progress: dict) -> dict:
        best = progress["best"]
        if best["model"] is not None:
            self.model.load_state_dict(best["model"])
        metrics, emb, labels = self.test(write_tables=True)
        store.atomic_save_npz(self.run_dir / store.EMBEDDINGS, embeddings=emb, labels=labels)
        train, train_labels = self.embed_split(self.data.train_eval)  # for the visualisations
        store.atomic_save_npz(
            self.run_dir / store.TRAIN_EMBEDDINGS, embeddings=train, labels=train_labels
        )
        # The same metrics on the training split: how far test falls from train (seed 003 Table 1).
        train_metrics = evaluate(train, train_labels, seed=self.cfg.seed)
        metrics.update({f"train_{key}": value for key, value in train_metrics.items()})
        metrics.update(
            run_summary(
                self.cfg,
                best_epoch=best["epoch"],
                untrained_network=progress["untrained_network"],
                loss_params={**loss_defaults(self.cfg.loss), **self.cfg.loss_params},
            )
        )
        store.atomic_write_json(self.run_dir / store.METRICS, metrics)
        return metrics


def run_summary(cfg: RunConfig, **extra) -> dict:
    return {
        "dataset": cfg.dataset,
        "protocol": cfg.protocol,
        "loss": cfg.loss,
        "miner": cfg.loss_params.get("miner"),
        "dims": cfg.dims,
        "seed": cfg.seed,
        "backbone": cfg.backbone,
        "pretrained": cfg.pretrained,
        "embedding": cfg.embedding,
        "freeze_backbone": cfg.freeze_backbone,
        "train_per_class": cfg.train_per_class,
        "val_split": cfg.val_split,
        "preset": cfg.preset,
        "epochs": cfg.epochs,
        **extra,
    }


def load_data(cfg: RunConfig) -> DataSplits:
    return load_dataset(
        cfg.dataset,
        cfg.protocol,
        cfg.val_fraction,
        data_root=cfg.data_root or None,
        resize=cfg.resize,
        crop=cfg.crop,
        pad=cfg.pad,
        train_per_class=cfg.train_per_class,
        val_split=cfg.val_split,
    )


def baseline_features(cfg: RunConfig, data: DataSplits, device: torch.device):
    """The untrained embedding of the test split: raw inputs where they are small vectors,
    else the backbone's features (with its pretrained weights) before any metric training."""
    if hasattr(data.test, "inputs"):
        return data.test.inputs(), "raw inputs", "none", "none"
    seed_everything(cfg.seed)
    model = build_model(cfg.backbone, cfg.dims, cfg.pretrained, data.in_channels).to(device)
    features, _ = embed(model, data.test, device, features=True, workers=cfg.workers)
    return features.numpy(), f"{cfg.backbone} features", cfg.backbone, cfg.pretrained


def run_baseline(cfg: RunConfig, results: Path, device: torch.device | None = None) -> Path:
    """The untrained baseline of a run's data set and backbone, evaluated like any run."""
    device = device or default_device()
    data = load_data(cfg)
    features, kind, backbone, pretrained = baseline_features(cfg, data, device)
    base = RunConfig(
        dataset=cfg.dataset,
        protocol=cfg.protocol,
        loss="untrained",
        dims=features.shape[1],
        backbone=backbone,
        pretrained=pretrained,
        epochs=0,
        resize=cfg.resize,
        crop=cfg.crop,
        val_fraction=cfg.val_fraction,
        data_root=cfg.data_root,
    )
    run_dir = Path(results) / base.run_id()
    if store.is_finished(run_dir):
        return run_dir
    labels = np.asarray(data.test.labels)
    record = {**base.to_dict(), "features": kind, "versions": package_versions()}
    store.atomic_write_json(run_dir / store.CONFIG, record)
    metrics = evaluate(features, labels, seed=base.seed)
    store.atomic_save_npz(run_dir / store.EMBEDDINGS, embeddings=features, labels=labels)
    metrics.update(run_summary(base, features=kind))
    store.atomic_write_json(run_dir / store.METRICS, metrics)
    return run_dir
