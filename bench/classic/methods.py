"""Sharma et al. 2015's methods on feature vectors, by name, and the runner that evaluates one of
them into a run folder like the deep runs' (config.json, test_embeddings.npz, mprec.csv and
metrics.json, written last)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import fields
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.classic.linear_ml import LinearML
from bench.classic.lmnn import LMNN
from bench.classic.nml import NML
from bench.classic.projections import NCAProjection, NoProjection, PCAProjection
from bench.data.feature_files import FeatureSplits
from bench.data.features import load_features
from bench.data.identity import data_identity
from bench.data.names import FEATURES_PREFIX
from bench.data.recall_ks import recall_ks
from bench.evaluation.health import embedding_health
from bench.evaluation.metrics import evaluate
from bench.evaluation.retrieval import MPREC_KS, mprec_at_k
from bench.protocols import DEFAULT_PROTOCOL, FeatureFile, Linear, shown_protocol
from bench.runs import store
from bench.runs.config import RUN_ID_ROOM
from bench.util.atomic import atomic_write_json, atomic_write_text
from bench.util.errors import check_known
from bench.util.names import fitted_name, safe_name
from bench.util.runtime import package_versions

METHODS: dict[str, type] = {
    "nml": NML,
    "linear-ml": LinearML,
    "pca": PCAProjection,
    "nca": NCAProjection,
    "lmnn": LMNN,
    "no-projection": NoProjection,
}
MPREC = "mprec.csv"
NOT_PARAMS = ("dims", "seed")


def check_method(name: str) -> None:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of: {', '.join(METHODS)}")


def method_defaults(name: str) -> dict[str, Any]:
    """A method's parameters (beyond dims and seed) with their defaults."""
    check_method(name)
    return {f.name: f.default for f in fields(METHODS[name]) if f.name not in NOT_PARAMS}


def build_method(name: str, dims: int, seed: int = 0, **params: Any):
    check_known("method", name, params, method_defaults(name))
    return METHODS[name](dims=dims, seed=seed, **params)


def run_record(
    dataset: str, protocol: str, method: str, params: dict, dims: int, seed: int
) -> tuple[str, dict]:
    """(run id, the fields that determine the run): dataset-[protocol-]linear-method-d-s-hash;
    `protocol` is the digits split, "file" for a features file (which carries its own)."""
    record = {
        "dataset": dataset,
        "data_protocol": protocol,
        "method": method,
        "params": params,
        "dims": dims,
        "seed": seed,
    }
    if dataset.startswith(FEATURES_PREFIX):  # another file at the same path is another run
        record.update(data_identity(dataset, ""))
    digest = hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:8]
    split = f"{protocol}-" if shown_protocol(protocol) else ""
    tail = f"{split}linear-{method}-d{dims}-s{seed}-{digest}"
    return fitted_name(safe_name(dataset), tail, RUN_ID_ROOM), record


def mprec_metrics(curve: np.ndarray) -> dict[str, float | None]:
    """mprec@1, @10, @50 (None where the test set has too few items for K neighbours)."""
    return {f"mprec@{k}": float(curve[k - 1]) if k <= len(curve) else None for k in MPREC_KS}


def run_linear_method(
    method: str,
    dataset: str = "digits",
    dims: int = 8,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    results: Path = Path("results"),
    force: bool = False,
    protocol: str = DEFAULT_PROTOCOL,
    features: FeatureSplits | None = None,
    device=None,
) -> Path:
    """Fit `method` on the training and validation features (Sharma et al. 2015 trains on
    train+val), embed the test features and evaluate them: the run folder. A finished run is
    skipped unless `force`, and then replaced only when the refit is written whole (a failed
    one keeps it). `protocol` is the digits split (a features file carries its own); `features`
    saves loading them again for every run; `device`: where the evaluation and mprec search
    (`torch_knn.search_device`; None: faiss on the CPU)."""
    if features is None:
        features = load_features(dataset, protocol=protocol)
    if dataset.startswith(FEATURES_PREFIX):
        protocol = FeatureFile.registry_name
    if method == "no-projection":
        dims = features.dims
    if dims > features.dims:
        raise ValueError(f"{method}: dims={dims} exceeds the {features.dims} feature dimensions")
    resolved = {**method_defaults(method), **(params or {})}
    model = build_method(method, dims, seed, **resolved)
    run_id, record = run_record(dataset, protocol, method, resolved, dims, seed)
    run_dir = Path(results) / run_id
    store.recover_run(run_dir)
    finished = store.is_finished(run_dir)
    if finished and not force:
        return run_dir
    # As `run --force`: the finished run is replaced only once its refit is written whole.
    target = store.staging_folder(run_dir) if finished else run_dir
    shutil.rmtree(target, ignore_errors=True)
    x, y = features.train_val()
    start = time.perf_counter()
    model.fit(x, y)  # first: a method that rejects the features leaves no folder behind
    fit_seconds = time.perf_counter() - start
    emb, labels = np.ascontiguousarray(model.transform(features.test)), features.test_labels
    check_finite(emb, method, dims, resolved)
    config = {
        **record,
        "protocol": Linear.registry_name,
        "run_id": run_id,
        "feature_dims": features.dims,
        "fit_size": len(y),
        "test_size": len(features.test_labels),
        "versions": {**package_versions(), "scikit-learn": version("scikit-learn")},
    }
    atomic_write_json(target / store.CONFIG, config)
    ks = recall_ks(dataset)
    found, scores = evaluate(emb, labels, seed=seed, ks=ks, device=device)
    store.save_test_embeddings(target, emb, labels, scores)
    curve = mprec_at_k(emb, labels, device=device)
    table = pd.DataFrame({"K": np.arange(1, len(curve) + 1), "mprec": curve})
    atomic_write_text(target / MPREC, table.to_csv(index=False))
    metrics = {
        **found,
        **mprec_metrics(curve),
        **embedding_health(emb, labels, seed, device),  # the report's health table, as a run's
        "dataset": dataset,
        "protocol": Linear.registry_name,
        "data_protocol": protocol,
        "loss": method,
        "miner": None,
        "dims": dims,
        "seed": seed,
        "fit_seconds": fit_seconds,
    }
    atomic_write_json(target / store.METRICS, metrics)
    if finished:
        store.replace_run(target, run_dir)
    return run_dir


def check_finite(emb: np.ndarray, method: str, dims: int, params: dict[str, Any]) -> None:
    """Refuse a fit whose test embeddings hold NaN or inf (SGD that diverged), before any of
    the run is written."""
    if np.isfinite(emb).all():
        return
    hint = f"; give a smaller --lr than {params['lr']:g}" if "lr" in params else ""
    raise ValueError(
        f"{method} d={dims}: the fit diverged (its projection gives NaN or inf embeddings), "
        f"and none of the run was written{hint}"
    )


def linear_runs(
    methods: list[str], dims: tuple[int, ...], seeds: tuple[int, ...], given: dict[str, Any]
) -> list[tuple[str, int, int, dict[str, Any]]]:
    """(method, dims, seed, params) of every run of a `linear` command, checked before any
    runs: unknown methods, and options no chosen method takes, are one-line errors.
    no-projection has one size (the features'), so one run per seed."""
    for name in methods:
        check_method(name)
    given = {key: value for key, value in given.items() if value is not None}
    for key in given:
        takers = [name for name in methods if key in method_defaults(name)]
        if not takers:
            applies = [name for name in METHODS if key in method_defaults(name)]
            raise ValueError(f"--{key} applies to {', '.join(applies)} only")
    plan = []
    for name in dict.fromkeys(methods):
        params = {k: v for k, v in given.items() if k in method_defaults(name)}
        sizes = (0,) if name == "no-projection" else dims
        plan += [(name, d, s, params) for d in sizes for s in seeds]
    return plan
