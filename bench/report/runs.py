"""The report's view of the run folders: one row per finished run, with its settings and the
labels that tell its variants apart."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd

from bench.data.names import FEATURES_PREFIX, FOLDER_PREFIX, identity_hash, resizes_images
from bench.evaluation.clustering import NMI_LEFT_OUT
from bench.evaluation.metrics import REQUIRED_KEYS, retrieval_keys
from bench.models.choices import sized_by_crop
from bench.protocols import DEFAULT_PROTOCOL, data_protocol, shown_protocol
from bench.report.records import config_fault, metrics_fault
from bench.report.texts import UNUSED, setting_text
from bench.runs import store
from bench.runs.config import (
    BASELINE_LOSS,
    NOT_HASHED,
    RunConfig,
    canonical_preset,
    unused_settings,
)
from bench.runs.weights import untrained_label, weights_label
from bench.util.names import fitted_name, safe_name
from losses import loss_family

RAW_BASELINE = "raw inputs"
# What keys a run's row otherwise: its table (data set, protocol, preset), its method (loss;
# its parameters as param_*), its size and seed; and what only locates the data or names the
# study a tuned run came from.
KEYED = ("dataset", "protocol", "loss", "loss_params", "dims", "seed", "data_location", "tuned")
# Every other setting that changes what a run computes (RunConfig's hashed fields) sets its row
# apart from runs that differ in it, the earlier ones in this order (their labels read as
# before); new runs record them in metrics.json, older ones in config.json, or at the default.
SETTINGS = tuple(
    dict.fromkeys(
        [
            *("backbone", "pretrained", "embedding", "freeze_backbone", "train_per_class"),
            *("val_split", "lr", "epochs", "batch_size", "data_fingerprint"),
            *(f.name for f in fields(RunConfig) if f.name not in (*NOT_HASHED, *KEYED)),
        ]
    )
)

DEFAULTS = RunConfig()
# A baseline's: what its inputs were made by (the settings that `applies` to the image pipeline
# or the crop), and pooled by (the untrained network's).
INPUT_SETTINGS = (*(f.name for f in fields(RunConfig) if f.metadata["applies"]), "pooling")


def read_config(run_dir: Path) -> dict:
    """A run's config.json, or {} where it is missing or unreadable."""
    try:
        config = json.loads((Path(run_dir) / store.CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _scalar(value: object) -> object:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def run_record(run_dir: Path, metrics: dict) -> dict:
    """One run's row: its metrics, its settings (metrics.json, else config.json, else the
    defaults), its loss's parameters as `param_<name>`, and its folder."""
    config = read_config(run_dir)
    params = metrics.get("loss_params") or config.get("resolved_loss_params") or {}
    params = params if isinstance(params, dict) else {}
    init = metrics.get("untrained_network") or {}
    init = init if isinstance(init, dict) else {}
    warnings = metrics.get("warnings") or []
    pretrained = metrics.get("pretrained", config.get("pretrained", DEFAULTS.pretrained))
    # Earlier runs did not record their weights' label: from the setting alone.
    weights = metrics.get("weights") or config.get("weights") or weights_label(str(pretrained))
    settings = {k: _scalar(metrics.get(k, config.get(k, getattr(DEFAULTS, k)))) for k in SETTINGS}
    # what the run left unused reads as nothing: glyphs are never resized, whatever --resize says
    settings.update(dict.fromkeys(unused_by(settings, metrics), UNUSED))
    return {
        **{
            k: _scalar(v)
            for k, v in metrics.items()
            if k not in ("loss_params", "untrained_network")
        },
        "warnings": "; ".join(map(str, warnings)) if isinstance(warnings, list) else str(warnings),
        **settings,
        "weights": str(weights),
        # the study a tuned run's settings came from: config.json records it, metrics.json not
        "tuned": _scalar(metrics.get("tuned", config.get("tuned", DEFAULTS.tuned))) or "",
        "m_per_class": drawn_per_class(metrics.get("sampler"), config, metrics),
        **{f"param_{k}": _scalar(v) for k, v in sorted(params.items()) if k != "miner"},
        "init_map@r": init.get("map@r"),
        "run": run_dir.name,
        "path": str(run_dir),
    }


def unused_by(settings: dict, metrics: dict) -> tuple[str, ...]:
    """The settings a run left unused, by its data set and backbone (`unused_settings`)."""
    dataset, backbone = str(metrics.get("dataset", "")), str(settings.get("backbone"))
    return unused_settings(resizes_images(dataset), sized_by_crop(backbone))


def drawn_per_class(sampler: object, config: dict, metrics: dict) -> object:
    """Examples of a class in a batch as the run drew them (its recorded sampler, '16 classes
    x 4'; NaN for 'random' batches, where --m-per-class played no part), else as set: a loss's
    own or a raised m reads as what trained, not as the setting."""
    if sampler == "random":
        return float("nan")
    if isinstance(sampler, str) and sampler.partition(" x ")[2].isdigit():
        return int(sampler.partition(" x ")[2])
    return _scalar(metrics.get("m_per_class", config.get("m_per_class", DEFAULTS.m_per_class)))


def load_runs(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run; problems name the folders that were skipped.

    `method` is the loss (and miner); `name` adds the settings that vary within the run's table.
    """
    df, problems, _ = read_runs(results)
    return df, problems


def read_runs(results: Path) -> tuple[pd.DataFrame, list[str], dict[str, list[str]]]:
    """`load_runs`, and by table the finished runs left out of it for a damaged record."""
    runs, problems = store.scan_runs(results)
    rows, left_out = [], {}
    for run_dir, metrics in runs:
        # tested without k-means: --clustering none, or the default's size cut (NMI_LEFT_OUT)
        if metrics.get("clustering") == "none" or NMI_LEFT_OUT in metrics:
            metrics.setdefault("nmi", float("nan"))
        fault = metrics_fault(metrics)
        fault = f"metrics.json {fault}" if fault else config_fault(run_dir, metrics)
        if fault:
            problems.append(f"{run_dir.name}: {fault}; the run is left out")
            if isinstance(metrics.get("dataset"), str):  # else no table to name it under
                table = table_names_of(metrics)[0]
                left_out.setdefault(table, []).append(f"{run_dir.name}: {fault}")
            continue
        if "nmi_best_of_5" not in metrics and "clustering" not in metrics:
            # earlier versions' NMI was the best of 5 restarts
            metrics["nmi_best_of_5"], metrics["nmi"] = metrics["nmi"], float("nan")
        table, base = table_names_of(metrics)
        rows.append({**run_record(run_dir, metrics), "table": table, "base_table": base})
    df = with_baselines(pd.DataFrame(rows))
    if len(df):
        df["miner"] = df.get("miner", pd.Series([None] * len(df))).fillna("")
        df["method"] = df["loss"] + df["miner"].map(lambda m: f" ({m})" if m else "")
        base = df["loss"] == BASELINE_LOSS
        df.loc[base, "method"] = df[base].apply(baseline_label, axis=1)
        df["name"] = pd.concat(variant_labels(part) for _, part in df.groupby("table"))
        df["family"] = families(df)
    return df, problems, left_out


def table_names_of(metrics: dict) -> tuple[str, str]:
    """(the run's table, its data's table: where its baselines are)."""
    protocol = metrics.setdefault("protocol", DEFAULT_PROTOCOL)
    # A linear method's runs follow a split of the data (`data_protocol`): their baseline is in
    # the deep runs' table of that split.
    split = data_protocol(metrics)
    base = data_name(metrics)
    base = f"{base}-{split}" if shown_protocol(split) else base
    table = base if protocol == split else f"{base}-{protocol}"
    # A paper's settings make a table of their own, under the preset's name of today.
    preset = canonical_preset(metrics.get("preset") or "")
    return (f"{table}-{preset}" if preset else table), base


def families(df: pd.DataFrame) -> pd.Series:
    """Each run's loss family as it recorded it, else (older runs) its loss's today; "" for the
    baselines."""
    recorded = column_or_nan(df, "family", None)
    known = df["loss"].map(loss_family)
    family = recorded.where(recorded.map(lambda f: isinstance(f, str) and bool(f)), known)
    return family.where(df["loss"] != BASELINE_LOSS, "").fillna("")


def shown_metrics(df: pd.DataFrame) -> list[str]:
    """The evaluator's metrics a table of these runs shows, in order: R@1, NMI and MAP@R
    always; each other R@K and R-Precision that a run recorded (its data set's own Ks:
    `bench.data.recall_ks`; runs of earlier versions recorded R@1/2/4/8 and no R-Precision)."""
    recorded = [k for k in df.columns if df[k].notna().any()]
    return retrieval_keys([*recorded, *REQUIRED_KEYS])


def data_name(metrics: dict) -> str:
    """The name of a run's data in table names: the data set's name, and for data other than
    the built-in sets a short hash of its identity (its resolved location and fingerprint;
    for runs that recorded neither, the name as given), so that two data sets whose names
    read alike ('folder:/data/鳥', 'folder:/data/猫') never share a table. A folder or file
    is named by its resolved location, so that one given as 'folder:imgs', 'folder:imgs/' or
    'folder:/home/me/imgs' is one table."""
    dataset = str(metrics["dataset"])
    location = metrics.get("data_location") or ""
    fingerprint = metrics.get("data_fingerprint") or ""
    prefix = next((p for p in (FOLDER_PREFIX, FEATURES_PREFIX) if dataset.startswith(p)), "")
    if prefix and location:
        dataset = prefix + Path(location).name
    if location or fingerprint:
        tag = identity_hash(location, fingerprint)
    elif dataset.startswith((FOLDER_PREFIX, FEATURES_PREFIX)):
        tag = hashlib.sha1(dataset.encode()).hexdigest()[:8]
    else:  # digits, glyphs: named in full by their name
        return safe_name(dataset)
    # Room for the longest file a table writes beside its name ("-tuned-folds-ranks.csv", ...).
    head = safe_name(dataset).rstrip("-") if prefix and location else safe_name(dataset)
    return fitted_name(head, tag, 180)


def baseline_label(run: pd.Series) -> str:
    """'raw inputs' or 'untrained <backbone> (<weights>)', as the run recorded it; runs of
    earlier versions recorded only their backbone ('none' for the raw inputs)."""
    recorded = run.get("features")
    if isinstance(recorded, str) and not recorded.endswith(" features"):
        return recorded
    if run.get("backbone") in (None, "none") or pd.isna(run.get("backbone")):
        return RAW_BASELINE
    return untrained_label(run["backbone"], run["pretrained"])


def with_baselines(df: pd.DataFrame) -> pd.DataFrame:
    """The untrained baseline rows of a data set and protocol, also in each preset's table."""
    if not len(df):
        return df
    baselines = df[df["loss"] == BASELINE_LOSS]
    tables = df[["table", "base_table"]].drop_duplicates()
    copies = [
        baselines[baselines["base_table"] == base].assign(table=table)
        for table, base in tables.itertuples(index=False)
        if table != base
    ]
    return pd.concat([df, *copies], ignore_index=True)


def _varying(df: pd.DataFrame, exclude: Sequence[str]) -> list[tuple[str, pd.Index]]:
    """(column, rows to label): a setting that takes several values among the trained runs of
    one method labels them all (one that differs only from method to method, as a preset's
    learning rate per loss, is in the setup instead); a loss parameter that does within a
    loss and size labels that loss."""
    trained = df[df["loss"] != BASELINE_LOSS]
    found = [(c, trained.index) for c in SETTINGS if c in df and read_apart(trained, c)]
    for column in sorted(c for c in df.columns if c.startswith("param_")):
        for _, runs in trained.groupby("loss", sort=True):
            # a parameter left out (None) is a value too: a run with a regularizer and one
            # without are two rows
            if (runs.groupby("dims")[column].nunique(dropna=False) > 1).any():
                found.append((column, runs.index))
    return [(c, rows) for c, rows in found if c not in exclude]


def read_apart(trained: pd.DataFrame, column: str) -> bool:
    """Whether a setting reads differently (`setting_text`) among one method's runs."""
    texts = trained[column].map(lambda v: setting_text(column, v))
    return bool((texts.groupby(trained["method"]).nunique() > 1).any())


def setting_labels(df: pd.DataFrame, exclude: Sequence[str] = ()) -> pd.Series:
    """Each run's settings that tell it apart from runs of the same method (other than the
    `exclude`d ones), e.g. 'GAP' or 'k=10, GAP'; '' where none does."""
    labels = pd.Series("", index=df.index, dtype=object)
    for column, rows in _varying(df, exclude):
        if column == "pretrained" and "weights" in df:
            texts = weights_texts(df.loc[rows])
        else:
            texts = df.loc[rows, column].map(lambda v, c=column: setting_text(c, v))
        labels.loc[rows] = joined(labels.loc[rows], texts)
    return labels.astype(str)  # pandas 3.0 with pyarrow cannot add an object column to a str one


def joined(labels: pd.Series, texts: pd.Series) -> pd.Series:
    """Each label with its text after a comma; an empty text (an unused setting) adds none."""
    both = (labels != "") & (texts != "")
    return labels.where(~both, labels + ", ") + texts


def tied_settings(df: pd.DataFrame) -> list[str]:
    """A loss's own settings (learning rate, loss parameters) that take one value in each
    method's runs of one regime (backbone, weights, validation split, ...): a tuned setting
    chosen per loss and start, rather than a sweep over it. The figures keep them out of the
    panels, so a table of tuned rows gets a panel per regime, not one per row."""
    own = [c for c in df.columns if c in ("lr", "weight_decay") or c.startswith("param_")]
    trained = df[df["loss"] != BASELINE_LOSS]
    if not own or not len(trained):
        return own
    regime = setting_labels(trained, exclude=own)
    groups = trained.assign(_regime=regime).groupby(["method", "_regime"])
    return [c for c in own if (groups[c].nunique() <= 1).all()]


def regime_labels(df: pd.DataFrame) -> pd.Series:
    """`setting_labels` without a loss's tied settings: what sets runs of one loss apart in
    the figures (a backbone, a start, a fold, a swept learning rate)."""
    return setting_labels(df, exclude=tied_settings(df))


def labelled_settings(df: pd.DataFrame) -> set[str]:
    """The settings that `setting_labels` writes into some run's label ('weights' with
    'pretrained', whose label it is)."""
    found = {column for column, _ in _varying(df, ())}
    return found | {"weights"} if "pretrained" in found else found


def weights_texts(runs: pd.DataFrame) -> pd.Series:
    """How runs' weights read in their label: 'random init', 'ImageNet weights', 'small_cnn
    pretrained on glyphs 1000-1999', not a file's path; with the file's name where two files
    read alike (pretrained on the same classes for other epochs)."""
    labels = runs["weights"].astype(str)
    texts = labels.where(
        labels.eq("random init") | labels.str.contains(" pretrained on "), labels + " weights"
    )
    files = runs["pretrained"].astype(str)
    shared = files.groupby(labels).transform("nunique") > 1
    return texts.where(~shared, texts + " (" + files.map(lambda f: Path(f).name) + ")")


def variant_labels(df: pd.DataFrame, exclude: Sequence[str] = ()) -> pd.Series:
    """Each run's method with its `setting_labels`, e.g. 'npair, GAP' or 'nngk, k=10'; a
    baseline's with the input settings that tell it from the table's other baselines."""
    settings = setting_labels(df, exclude) + baseline_input_labels(df)
    names = df["method"].astype(str)
    return names.where(settings == "", names + ", " + settings)


def baseline_input_labels(df: pd.DataFrame) -> pd.Series:
    """A baseline's input settings where the baselines of its label differ in them ('resize
    48, crop 40'): runs of two input pipelines write a baseline each, which are two rows, never
    one mean as copies of a seed."""
    labels = pd.Series("", index=df.index, dtype=object)
    base = df[df["loss"] == BASELINE_LOSS]
    for column in (c for c in INPUT_SETTINGS if c in base):
        texts = base[column].map(lambda v, c=column: setting_text(c, v))
        rows = texts.index[texts.groupby(base["method"]).transform("nunique") > 1]
        labels.loc[rows] = joined(labels.loc[rows], texts[rows])
    return labels.astype(str)


def trained_runs(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["loss"] != BASELINE_LOSS]


def embedded_trained_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The trained runs with saved test embeddings (none: an empty frame, its columns kept)."""
    runs = trained_runs(df)
    saved = runs["path"].map(lambda p: (Path(p) / store.EMBEDDINGS).is_file())
    return runs[saved.astype(bool)]  # an empty mask of objects would select columns


def column_or_nan(df: pd.DataFrame, name: str, default: object = np.nan) -> pd.Series:
    return df[name] if name in df else pd.Series(default, index=df.index, dtype=object)
