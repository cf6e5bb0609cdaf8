"""Classification scoring (classify protocol): accuracy and NLL of a loss's classifier."""

from __future__ import annotations

import numpy as np
import torch


def classification_scores(probs: torch.Tensor, labels: np.ndarray) -> dict:
    """Accuracy of the argmax and the mean negative log-likelihood of the true class."""
    labels_t = torch.as_tensor(labels, dtype=torch.long)
    accuracy = (probs.argmax(dim=1) == labels_t).float().mean()
    nll = -torch.log(probs.gather(1, labels_t[:, None]).clamp_min(1e-12)).mean()
    return {"accuracy": float(accuracy), "nll": float(nll)}
