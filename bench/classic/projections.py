"""Sharma et al. 2015's unlearned and scikit-learn baselines: no projection, PCA and NCA, each on
L2-normalised features (the paper's normalisation for every baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.decomposition import PCA
from sklearn.neighbors import NeighborhoodComponentsAnalysis

from bench.classic.linear_ml import l2_normalise


@dataclass
class NoProjection:
    """The full features, L2-normalised ('No proj' in the paper); `dims` is ignored."""

    dims: int = 0
    seed: int = 0

    def fit(self, x: np.ndarray, y: np.ndarray) -> NoProjection:
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return l2_normalise(x)


@dataclass
class PCAProjection:
    """Principal component analysis to `dims` dimensions."""

    dims: int
    seed: int = 0

    def fit(self, x: np.ndarray, y: np.ndarray) -> PCAProjection:
        self.pca = PCA(n_components=self.dims, random_state=self.seed).fit(l2_normalise(x))
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return self.pca.transform(l2_normalise(x)).astype(np.float32)


@dataclass
class NCAProjection:
    """Neighbourhood components analysis (Goldberger et al.), scikit-learn's, PCA-initialised."""

    dims: int
    seed: int = 0
    max_iter: int = 50  # scikit-learn's default

    def fit(self, x: np.ndarray, y: np.ndarray) -> NCAProjection:
        self.nca = NeighborhoodComponentsAnalysis(
            n_components=self.dims, init="pca", max_iter=self.max_iter, random_state=self.seed
        ).fit(l2_normalise(x), y)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return self.nca.transform(l2_normalise(x)).astype(np.float32)
