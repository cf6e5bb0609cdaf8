"""How a run's settings read in its row's label and the setup: 'GAP', 'frozen backbone', 'k=10'."""

from __future__ import annotations

import numpy as np
import pandas as pd

UNUSED = "unused"  # a setting the run left unused (bench.report.runs.unused_by): in no label
EMBEDDINGS = {"fc": "FC", "gap": "GAP", "backbone": "backbone output"}


def format_value(value: object) -> str:
    if isinstance(value, float):
        return "-" if np.isnan(value) else f"{value:g}"
    return str(value)


def setting_text(column: str, value: object) -> str:
    """How a run's setting reads after its method, e.g. 'GAP', 'frozen backbone', 'k=10'; ''
    for a setting it left unused; 'no regularizer' for a loss parameter left out (None, or
    not recorded)."""
    if value is UNUSED or value == UNUSED:
        return ""
    texts = {
        "embedding": lambda v: EMBEDDINGS.get(v, format_value(v)),
        "freeze_backbone": lambda v: "frozen backbone" if v else "trained backbone",
        "train_per_class": lambda v: f"{int(v)} per class" if v else "all per class",
        "pretrained": lambda v: f"{v} weights",
        "param_learn_weights": lambda v: "learned weights" if v else "fixed weights",
        "val_split": lambda v: f"validated on held-out {v}",
        "lr": lambda v: f"lr={format_value(v)}",
        "batch_size": lambda v: f"batch {format_value(v)}",
        "epochs": lambda v: f"{format_value(v)} epochs",
        "data_fingerprint": lambda v: f"data {v[:8]}" if v else "built-in data",
        "m_per_class": lambda v: (
            "random batches" if pd.isna(v) else f"{format_value(v)} a class in a batch"
        ),
        "memory": lambda v: f"memory {format_value(v)}" if v else "no memory",
        "momentum": lambda v: f"momentum {format_value(v)}",
        "weight_decay": lambda v: f"weight decay {format_value(v)}",
        "val_fraction": lambda v: f"validation fraction {format_value(v)}",
        "clustering": lambda v: f"clustering {v}",
        "resize": lambda v: f"resize {format_value(v)}",
        "crop": lambda v: f"crop {format_value(v)}",
        "pad": lambda v: f"pad {format_value(v)}",
        "crop_mode": lambda v: f"{v} crops",
        "freeze_bn": lambda v: "frozen BN" if v else "BN trained",
        "pooling": lambda v: f"{v} pooling",
        "warmup_epochs": lambda v: f"warm-up epochs {format_value(v)}" if v else "no warm-up",
        "schedule": lambda v: "constant lr" if v == "none" else f"{v} lr schedule",
        "embedding_lr": lambda v: f"embedding layer at {format_value(v)}x lr",
        "crop_scale": lambda v: f"crop area {v or '0.08,1'}",
        # The optimizer's name: its recorded description repeats momentum and weight decay.
        "optimizer": lambda v: str(v).split(" (")[0],
    }
    if column in texts:
        return texts[column](value)
    if column.startswith("param_"):
        name = column.removeprefix("param_")
        return f"no {name}" if pd.isna(value) else f"{name}={format_value(value)}"
    return format_value(value)
