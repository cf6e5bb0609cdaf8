"""Comparison tables and plots, read only from finished run folders.

Per table (a data set under a protocol): the embedding results (`<table>.md/.csv/.png`), the
published numbers, and whichever of the papers' other tables and figures its runs have the data
for; across the classify-protocol tables, the classification comparison (seed 000 Tables 3-5).
A table or figure whose runs lack what it needs is left out; one that fails on a damaged file is
named among the problems, never a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from bench.evaluation.metrics import METRIC_KEYS
from bench.evaluation.pairs import best_and_worst
from bench.evaluation.retrieval import MPREC_KS, recall_at_k
from bench.report import figures
from bench.report.reference import reference_rows
from bench.report.visualize import subsample
from bench.runs import store
from bench.runs.config import RunConfig
from bench.util.atomic import atomic_write_bytes, atomic_write_text
from bench.util.knn import knn
from bench.util.names import safe_name

BASELINE_LOSS = "untrained"
RAW_BASELINE = f"{BASELINE_LOSS} (raw inputs)"
PROTOCOL_COLUMNS = {
    "accuracy": "Accuracy",
    **{f"mprec@{k}": f"mprec@{k}" for k in MPREC_KS},  # seed 002's methods
    **{
        f"{split}_{m}": f"{split} {label}"
        for split in ("seen", "unseen")
        for m, label in (("accuracy", "acc."), ("far", "FAR"), ("frr", "FRR"), ("ap", "AP"))
    },
}
COLUMNS = {
    "recall@1": "R@1",
    "recall@2": "R@2",
    "recall@4": "R@4",
    "recall@8": "R@8",
    "nmi": "NMI",
    "map@r": "MAP@R",
}
# Settings that new runs record in metrics.json; older runs have them in config.json only.
SETTINGS = (
    "backbone",
    "pretrained",
    "embedding",
    "freeze_backbone",
    "train_per_class",
    "val_split",
    "lr",
    "epochs",
)
DEFAULTS = RunConfig()
EMBEDDINGS = {"fc": "FC", "gap": "GAP", "backbone": "backbone output"}
SPLITS = ("seen", "unseen")
TSNE_POINTS = 500  # test points per yoked t-SNE layout (exact t-SNE is O(n^2) per layout)
BEST_WORST = 3  # categories at each end (seed 004 Table 3)
CLASSIFICATION = "classification"
FLOAT = "%.6f"
Files = dict[str, bytes]

# ---------------------------------------------------------------- loading


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
    return {
        **{k: v for k, v in metrics.items() if k not in ("loss_params", "untrained_network")},
        **{k: _scalar(metrics.get(k, config.get(k, getattr(DEFAULTS, k)))) for k in SETTINGS},
        **{f"param_{k}": _scalar(v) for k, v in sorted(params.items()) if k != "miner"},
        "init_map@r": init.get("map@r"),
        "run": run_dir.name,
        "path": str(run_dir),
    }


def load_runs(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run; problems name the folders that were skipped.

    `method` is the loss (and miner); `name` adds the settings that vary within the run's table.
    """
    runs, problems = store.scan_runs(results)
    rows = []
    for run_dir, metrics in runs:
        missing = [k for k in (*METRIC_KEYS, "dataset", "loss", "dims", "seed") if k not in metrics]
        if missing:
            problems.append(f"{run_dir.name}: metrics.json lacks {', '.join(missing)}")
            continue
        protocol = metrics.setdefault("protocol", "metric")
        # Seed 002's methods (protocol "linear") follow a split of the data (data_protocol;
        # "file" for a features file): their baseline is in the deep runs' table of that split.
        split = metrics.get("data_protocol") or protocol
        split = "metric" if split == "file" else split
        base = safe_name(metrics["dataset"])
        base = base if split == "metric" else f"{base}-{split}"
        table = base if protocol == split else f"{base}-{protocol}"
        preset = metrics.get("preset") or ""  # a paper's settings make a table of their own
        table = f"{table}-{preset}" if preset else table
        rows.append({**run_record(run_dir, metrics), "table": table, "base_table": base})
    df = with_baselines(pd.DataFrame(rows))
    if len(df):
        df["miner"] = df.get("miner", pd.Series([None] * len(df))).fillna("")
        df["method"] = df["loss"] + df["miner"].map(lambda m: f" ({m})" if m else "")
        df.loc[df["loss"] == BASELINE_LOSS, "method"] = RAW_BASELINE
        df["name"] = pd.concat(variant_labels(part) for _, part in df.groupby("table"))
    return df, problems


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


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "-" if np.isnan(value) else f"{value:g}"
    return str(value)


def setting_text(column: str, value: object) -> str:
    """How a run's setting reads after its method, e.g. 'GAP', 'frozen backbone', 'k=10'."""
    texts = {
        "embedding": lambda v: EMBEDDINGS.get(v, _fmt(v)),
        "freeze_backbone": lambda v: "frozen backbone" if v else "trained backbone",
        "train_per_class": lambda v: f"{int(v)} per class" if v else "all per class",
        "pretrained": lambda v: f"{v} weights",
        "param_learn_weights": lambda v: "learned weights" if v else "fixed weights",
        "val_split": lambda v: f"validated on held-out {v}",
        "lr": lambda v: f"lr={_fmt(v)}",
        "epochs": lambda v: f"{_fmt(v)} epochs",
    }
    if column in texts:
        return texts[column](value)
    if column.startswith("param_"):
        return f"{column.removeprefix('param_')}={_fmt(value)}"
    return _fmt(value)


def _varying(df: pd.DataFrame, exclude: Sequence[str]) -> list[tuple[str, pd.Index]]:
    """(column, rows to label): a setting that takes several values among the trained runs
    labels them all; a loss parameter that does within a loss and size labels that loss."""
    trained = df[df["loss"] != BASELINE_LOSS]
    found = [(c, trained.index) for c in SETTINGS if c in df and trained[c].nunique() > 1]
    for column in sorted(c for c in df.columns if c.startswith("param_")):
        for _, runs in trained.groupby("loss", sort=True):
            if (runs.groupby("dims")[column].nunique() > 1).any():
                found.append((column, runs.index))
    return [(c, rows) for c, rows in found if c not in exclude]


def setting_labels(df: pd.DataFrame, exclude: Sequence[str] = ()) -> pd.Series:
    """Each run's settings that tell it apart from runs of the same method (other than the
    `exclude`d ones), e.g. 'GAP' or 'k=10, GAP'; '' where none does."""
    labels = pd.Series("", index=df.index, dtype=object)
    for column, rows in _varying(df, exclude):
        texts = df.loc[rows, column].map(lambda v, c=column: setting_text(c, v))
        labels.loc[rows] = labels.loc[rows].map(lambda t: f"{t}, " if t else "") + texts
    return labels


def variant_labels(df: pd.DataFrame, exclude: Sequence[str] = ()) -> pd.Series:
    """Each run's method with its `setting_labels`, e.g. 'npair, GAP' or 'nngk, k=10'."""
    settings = setting_labels(df, exclude)
    names = df["method"].astype(str)
    return names.where(settings == "", names + ", " + settings)


# ---------------------------------------------------------------- shared table helpers


def cell(mean: float, std: float) -> str:
    if pd.isna(mean):
        return "-"
    text = f"{100 * mean:.2f}"
    return text if pd.isna(std) else f"{text} ± {100 * std:.2f}"


def percent(value: float) -> str:
    return "" if pd.isna(value) else f"{100 * value:.2f}"


def _github(rows: list[list], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=list(headers), tablefmt="github", disable_numparse=True) + "\n"


def _trained(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["loss"] != BASELINE_LOSS]


def _column(df: pd.DataFrame, name: str, default: object = np.nan) -> pd.Series:
    return df[name] if name in df else pd.Series(default, index=df.index, dtype=object)


def mean_std_table(df: pd.DataFrame, index: list[str], column: str, value: str) -> pd.DataFrame:
    """A row per `index` value with `<c> mean` and `<c> std` of `value` over the runs (seeds)
    for each value c of `column`, and the number of runs in the row."""
    stats = df.groupby([*index, column], sort=True, dropna=False)[value].agg(["mean", "std"])
    stats = stats.unstack(column)
    wide = pd.DataFrame(index=stats.index)
    for c in sorted(df[column].unique()):
        wide[f"{c} mean"] = stats[("mean", c)]
        wide[f"{c} std"] = stats[("std", c)]
    wide["runs"] = df.groupby(index, sort=True, dropna=False).size()
    return wide.reset_index()


def wide_markdown(wide: pd.DataFrame, index: dict[str, str]) -> str:
    """mean_std_table as markdown: the `index` columns (renamed), a mean ± std cell per column
    value, and the runs."""
    values = [c.removesuffix(" mean") for c in wide.columns if c.endswith(" mean")]
    rows = [
        [
            *(_fmt(r[c]) for c in index),
            *(cell(r[f"{v} mean"], r[f"{v} std"]) for v in values),
            int(r["runs"]),
        ]
        for _, r in wide.iterrows()
    ]
    return _github(rows, [*index.values(), *values, "runs"])


def parse_setting(setting: str) -> dict[str, str]:
    """A reference row's setting, 'seen; rank=1 of 100; category=pizza', as a dict; the first
    part without '=' under 'tag'."""
    fields: dict[str, str] = {}
    for part in (p.strip() for p in setting.split(";")):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
        elif part:
            fields.setdefault("tag", part)
    return fields


def _reference(datasets: Sequence[str], protocol: str) -> pd.DataFrame:
    frames = [reference_rows(d, protocol) for d in sorted(set(datasets))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _published(title: str, body: str) -> str:
    return f"\n## Published: {title} (from the papers, not measured here)\n\n{body}"


# ---------------------------------------------------------------- embedding table


def protocol_metrics(df: pd.DataFrame) -> list[str]:
    """The protocol's own metrics that these runs have (classify: accuracy; pairs: seen and
    unseen verification), shown after the retrieval metrics."""
    return [m for m in PROTOCOL_COLUMNS if m in df and df[m].notna().any()]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per method (with its varying settings) and size, baseline first."""
    grouped = df.groupby(["name", "dims"], sort=True)
    table = grouped[[*METRIC_KEYS, *protocol_metrics(df), "init_map@r"]].agg(["mean", "std"])
    table.columns = [f"{m}_{s}" for m, s in table.columns]
    table["runs"] = grouped.size()
    table = table.reset_index().rename(columns={"name": "method"})
    table["_order"] = (table["method"] != RAW_BASELINE).astype(int)
    return table.sort_values(["_order", "method", "dims"]).drop(columns="_order")


def markdown_table(summary: pd.DataFrame, dataset: str) -> str:
    extra = [m for m in PROTOCOL_COLUMNS if f"{m}_mean" in summary]
    keys = (*METRIC_KEYS, *extra, "init_map@r")
    rows = [
        [
            r["method"],
            int(r["dims"]),
            *(cell(r[f"{k}_mean"], r[f"{k}_std"]) for k in keys),
            int(r["runs"]),
        ]
        for _, r in summary.iterrows()
    ]
    headers = [
        "loss",
        "dims",
        *COLUMNS.values(),
        *(PROTOCOL_COLUMNS[m] for m in extra),
        "MAP@R at init",
        "runs",
    ]
    return (
        f"# {dataset}: embedding results on the test split\n\n"
        "Metrics x100, mean ± std over seeds (runs = number of seeds). The untrained row "
        "evaluates the raw test inputs; MAP@R at init is each run's network before any "
        "training, evaluated the same way.\n\n" + _github(rows, headers)
    )


def paper_table(dataset: str, protocol: str) -> pd.DataFrame:
    """The papers' published numbers for this data set and protocol, one row per paper row."""
    ref = reference_rows(dataset, protocol)
    if not len(ref):
        return ref
    ref = ref.assign(dims=ref["dims"].astype("string").fillna(""))
    keys = ["paper", "table", "method", "dims", "setting"]
    wide = ref.pivot_table(index=keys, columns="metric", values="value", aggfunc="first")
    order = [m for m in (*METRIC_KEYS, "accuracy", "far", "frr") if m in wide.columns]
    return wide[order].reset_index()


def paper_markdown(papers: pd.DataFrame) -> str:
    if not len(papers):
        return ""
    metrics = [
        c for c in papers.columns if c not in ("paper", "table", "method", "dims", "setting")
    ]
    rows = [
        [
            f"paper: {r['paper']}, {r['table']}",
            r["method"],
            r["dims"],
            r["setting"],
            *(percent(r[m]) for m in metrics),
        ]
        for _, r in papers.iterrows()
    ]
    headers = ["source", "method", "dims", "setting", *(COLUMNS.get(m, m) for m in metrics)]
    return "\n## Published numbers (from the papers, not measured here)\n\n" + _github(
        rows, headers
    )


def dims_figure(part: pd.DataFrame) -> bytes:
    """R@1 and NMI against embedding size, a line per method, the raw inputs dashed
    (seed 000 Fig. 2a/b)."""
    trained, baseline = _trained(part), part[part["loss"] == BASELINE_LOSS]
    data = trained if len(trained) else part
    lines = {k: baseline[k].mean() for k in ("recall@1", "nmi")} if len(trained) else {}
    # Settings that vary (backbone, validation split, ...) get a row of panels each.
    variant = setting_labels(data)
    if variant.nunique() > 1:
        data = data.assign(variant=variant)
        return figures.metrics_vs_dims(data, ["recall@1", "nmi"], lines, panel="variant")
    return figures.metrics_vs_dims(data.assign(method=data["name"]), ["recall@1", "nmi"], lines)


def embedding_files(part: pd.DataFrame, table: str) -> Files:
    """<table>.md, .csv, .png, -paper.csv and -recall-at-k.png (seed 000 Tables 1-2, Fig. 2)."""
    summary = summarise(part)
    papers = paper_table(part["dataset"].iloc[0], part["protocol"].iloc[0])
    files = {
        f"{table}.md": (markdown_table(summary, table) + paper_markdown(papers)).encode(),
        f"{table}.csv": summary.to_csv(index=False, float_format=FLOAT).encode(),
        f"{table}.png": dims_figure(part),
    }
    if len(papers):
        files[f"{table}-paper.csv"] = papers.to_csv(index=False).encode()
    trained = _trained(part)
    if len(trained):
        files[f"{table}-recall-at-k.png"] = figures.recall_at_k_curves(
            trained.assign(method=trained["name"])
        )
    return files


# ---------------------------------------------------------------- classification (Tables 3-5)

CLASSIFY_ROWS = {
    "dataset": "data set",
    "backbone": "backbone",
    "pretrained": "init",
    "dims": "dims",
}
ABLATION_ROWS = {**CLASSIFY_ROWS, "learn_weights": "learn weights", "fine_tune": "fine-tune"}
# How the runs differ in the ablation; the classification table holds the standard runs.
ABLATION_SETTINGS = ("freeze_backbone", "param_learn_weights", "train_per_class")


def _classified(df: pd.DataFrame) -> pd.DataFrame:
    """Trained classify-protocol runs with a test accuracy."""
    if "accuracy" not in df or not len(df):
        return df.iloc[:0]
    return _trained(df[(df["protocol"] == "classify") & df["accuracy"].notna()])


def _yes_no(flags: pd.Series) -> pd.Series:
    return flags.map(lambda v: "yes" if v else "no")


def _fixed_weights(df: pd.DataFrame) -> pd.Series:
    return _column(df, "param_learn_weights").eq(False)


def _frozen(df: pd.DataFrame) -> pd.Series:
    return _column(df, "freeze_backbone", False).eq(True)


def classification_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Seed 000 Tables 3-4: test accuracy, a row per data set, backbone, initial weights and
    size, a column per loss; standard runs only (trained backbone, learned NNGK weights, every
    training image)."""
    runs = _classified(runs)
    runs = runs[~_frozen(runs) & ~_fixed_weights(runs) & (runs["train_per_class"] == 0)]
    if not len(runs):
        return pd.DataFrame()
    runs = runs.assign(column=variant_labels(runs, ABLATION_SETTINGS + tuple(CLASSIFY_ROWS)))
    return mean_std_table(runs, list(CLASSIFY_ROWS), "column", "accuracy")


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Seed 000 Table 5: NNGK's accuracy with learned or fixed weights and a trained or frozen
    backbone; empty unless some NNGK run has fixed weights or a frozen backbone."""
    runs = _classified(runs)
    runs = runs[(runs["loss"] == "nngk") & (runs["train_per_class"] == 0)]
    if not (_frozen(runs).any() or _fixed_weights(runs).any()):
        return pd.DataFrame()
    runs = runs.assign(
        learn_weights=_yes_no(~_fixed_weights(runs)), fine_tune=_yes_no(~_frozen(runs))
    )
    keys = [*CLASSIFY_ROWS, "fine_tune", "learn_weights"]
    grouped = runs.groupby(keys, sort=True, dropna=False)["accuracy"]
    return grouped.agg(["mean", "std", "size"]).reset_index().rename(columns={"size": "runs"})


def ablation_markdown(table: pd.DataFrame) -> str:
    rows = [
        [*(_fmt(r[c]) for c in ABLATION_ROWS), cell(r["mean"], r["std"]), int(r["runs"])]
        for _, r in table.iterrows()
    ]
    return "\n## Ablation (seed 000 Table 5): NNGK test accuracy x100\n\n" + _github(
        rows, [*ABLATION_ROWS.values(), "accuracy", "runs"]
    )


def classification_paper(datasets: Sequence[str]) -> str:
    """Seed 000 Tables 3-4 (a column per loss) and Table 5 (its settings) for these data sets."""
    ref = _reference(datasets, "classify")
    if not len(ref):
        return ""
    ref = ref[ref["metric"] == "accuracy"]
    main = ref[ref["table"].isin(["Table 3", "Table 4"])]
    text = ""
    if len(main):
        keys = ["paper", "table", "dataset", "backbone"]
        wide = main.pivot_table(index=keys, columns="loss", values="value", aggfunc="first")
        rows = [[*key, *(percent(v) for v in r)] for key, r in wide.iterrows()]
        text += _github(rows, ["paper", "table", "data set", "backbone", *wide.columns])
    ablation = ref[ref["table"] == "Table 5"]
    if len(ablation):
        fields = ["initial", "tune sigma", "learn weights", "fine-tune"]
        rows = [
            [r["paper"], r["dataset"], r["backbone"], r["dims"]]
            + [parse_setting(r["setting"]).get(f, "") for f in fields]
            + [percent(r["value"])]
            for _, r in ablation.iterrows()
        ]
        headers = ["paper", "data set", "backbone", "dims", *fields, "accuracy"]
        text += "\nTable 5:\n\n" + _github(rows, headers)
    return _published("seed 000 Tables 3-5, test accuracy x100", text)


def classification_files(runs: pd.DataFrame, name: str) -> Files:
    """classification.md and .csv (Tables 3-4), classification-ablation.csv (Table 5)."""
    table = classification_table(runs)
    ablation = ablation_table(runs)
    if not len(table) and not len(ablation):
        return {}
    text = (
        "# Classification: test accuracy x100 per backbone and loss\n\n"
        "Mean ± std over seeds (runs = runs in the row); trained backbone, learned NNGK "
        "weights, every training image (seed 000 Tables 3 and 4).\n\n"
    )
    files: Files = {}
    if len(table):
        text += wide_markdown(table, CLASSIFY_ROWS)
        files[f"{name}.csv"] = table.to_csv(index=False, float_format=FLOAT).encode()
    if len(ablation):
        text += ablation_markdown(ablation)
        files[f"{name}-ablation.csv"] = ablation.to_csv(index=False, float_format=FLOAT).encode()
    text += classification_paper(_classified(runs)["dataset"].unique())
    return {f"{name}.md": text.encode(), **files}


# ---------------------------------------------------------------- seed 003 Table 1


def train_recall_at_1(run_dir: Path) -> float:
    """R@1 on a run's saved training embeddings (runs from before train_recall@1 was kept)."""
    path = Path(run_dir) / store.TRAIN_EMBEDDINGS
    if not path.is_file():
        return float("nan")
    with np.load(path) as saved:
        embeddings, labels = saved["embeddings"], saved["labels"]
    _, idx = knn(embeddings, 1)
    return recall_at_k(labels[idx], labels, ks=(1,))["recall@1"]


def _split_rows(embedding: pd.Series, split: str) -> tuple[pd.Series, pd.Series]:
    """Row labels 'FC (train)' and their order: training rows first, then FC, GAP, backbone."""
    order = {e: i for i, e in enumerate(EMBEDDINGS)}
    rank = embedding.map(lambda e: order.get(e, len(order))) + (0 if split == "train" else 10)
    return embedding.map(lambda e: f"{EMBEDDINGS.get(e, e).split()[0]} ({split})"), rank


def train_test_table(part: pd.DataFrame) -> pd.DataFrame:
    """Seed 003 Table 1: R@1 of each embedding on the training and the test split, a column
    per method; empty unless the runs have training metrics or several embeddings."""
    runs = _trained(part)
    train = _column(runs, "train_recall@1").astype(float)
    if not (train.notna().any() or runs["embedding"].nunique() > 1):
        return pd.DataFrame()
    missing = train.isna()
    train[missing] = runs.loc[missing, "path"].map(train_recall_at_1)
    column = variant_labels(runs, ["embedding"])
    frames = []
    for split, value in (("train", train), ("test", runs["recall@1"])):
        row, order = _split_rows(runs["embedding"], split)
        frames.append(runs.assign(row=row, order=order, column=column, value=value))
    table = mean_std_table(pd.concat(frames), ["order", "row", "dims"], "column", "value")
    return table.drop(columns="order")


def train_test_paper(dataset: str, protocol: str) -> str:
    """Seed 003's Table 1 or 2 for this data set: R@1 per embedding and split, a column per
    selection strategy."""
    ref = reference_rows(dataset, protocol)
    ref = ref[ref["setting"].str.contains("split=") & (ref["metric"] == "recall@1")]
    if not len(ref):
        return ""
    fields = ref["setting"].map(parse_setting)
    embedding = fields.map(lambda f: f.get("embedding", "").lower())
    row, order = _split_rows(embedding, "train")
    test_row, test_order = _split_rows(embedding, "test")
    is_test = fields.map(lambda f: f.get("split") == "test")
    ref = ref.assign(row=row.where(~is_test, test_row), order=order.where(~is_test, test_order))
    keys = ["paper", "table", "order", "row", "dims"]
    wide = ref.pivot_table(index=keys, columns="method", values="value", aggfunc="first")
    rows = [[k[0], k[1], k[3], k[4], *(percent(v) for v in r)] for k, r in wide.iterrows()]
    names = ref.drop_duplicates("method")
    legend = ", ".join(
        f"{r['method']} = {r['loss']}" + (f" ({r['miner']})" if r["miner"] else "")
        for _, r in names.sort_values("method").iterrows()
    )
    body = _github(rows, ["paper", "table", "embedding (split)", "dims", *wide.columns])
    return _published(
        "seed 003, R@1 x100", f"{legend}; see each row's note in papers.csv.\n\n{body}"
    )


def train_test_files(part: pd.DataFrame, table: str) -> Files:
    """<table>-train-test.md and .csv (seed 003 Table 1)."""
    wide = train_test_table(part)
    if not len(wide):
        return {}
    text = (
        f"# {table}: R@1 x100 on the training and the test split (seed 003 Table 1)\n\n"
        "Per embedding (FC: a linear layer after the backbone; GAP: its global average "
        "pooling), mean ± std over seeds.\n\n"
        + wide_markdown(wide, {"row": "embedding (split)", "dims": "dims"})
        + train_test_paper(part["dataset"].iloc[0], part["protocol"].iloc[0])
    )
    return {
        f"{table}-train-test.md": text.encode(),
        f"{table}-train-test.csv": wide.to_csv(index=False, float_format=FLOAT).encode(),
    }


# ---------------------------------------------------------------- seed 004 Table 3


def read_categories(run_dir: Path, split: str) -> pd.DataFrame | None:
    path = Path(run_dir) / f"categories_{split}.csv"
    return pd.read_csv(path, dtype={"class_name": str}) if path.is_file() else None


def mean_categories(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per category: accuracy, FAR and FRR averaged over runs (with `<m>_std`), and `seeds`."""
    grouped = pd.concat(frames).groupby(["label", "class_name"], sort=True)
    metrics = ["accuracy", "far", "frr"]
    table = grouped[metrics].mean()
    for m in metrics:
        table[f"{m}_std"] = grouped[m].std()
    table["seeds"] = grouped.size()
    return table.reset_index()


def categories_table(part: pd.DataFrame) -> pd.DataFrame:
    """Seed 004 Table 3: the best and worst categories of each loss, size and split, ranked by
    accuracy averaged over the seeds (bench.pairs.best_and_worst)."""
    tables = []
    for (name, dims), runs in _trained(part).groupby(["name", "dims"], sort=True):
        for split in SPLITS:
            frames = [read_categories(p, split) for p in runs["path"]]
            frames = [f for f in frames if f is not None]
            if not frames:
                continue
            ranked = mean_categories(frames)
            top = best_and_worst(ranked, BEST_WORST).assign(of=len(ranked))
            tables.append(top.assign(method=name, dims=dims, split=split))
    if not tables:
        return pd.DataFrame()
    table = pd.concat(tables, ignore_index=True)
    first = ["method", "dims", "split", "rank", "position", "of", "label", "class_name"]
    return table[[*first, *(c for c in table.columns if c not in first)]]


def categories_paper(dataset: str) -> str:
    ref = reference_rows(dataset, "pairs")
    ref = ref[ref["setting"].str.contains("category=")]
    if not len(ref):
        return ""
    fields = ref["setting"].map(parse_setting)
    ref = ref.assign(
        split=fields.map(lambda f: f.get("tag", "")),
        place=fields.map(lambda f: f.get("rank", "")),
        category=fields.map(lambda f: f.get("category", "")),
    )
    keys = ["paper", "method", "split", "place", "category"]
    wide = ref.pivot_table(
        index=keys, columns="metric", values="value", aggfunc="first", sort=False
    )
    rows = [[*k, *(percent(r[m]) for m in ("accuracy", "far", "frr"))] for k, r in wide.iterrows()]
    headers = ["paper", "method", "split", "rank", "category", "Acc.", "FAR", "FRR"]
    return _published("seed 004 Table 3, x100", _github(rows, headers))


def categories_files(part: pd.DataFrame, table: str) -> Files:
    """<table>-categories.md and .csv: best and worst categories (seed 004 Table 3)."""
    ranked = categories_table(part)
    if not len(ranked):
        return {}
    rows = [
        [
            r["method"],
            int(r["dims"]),
            r["split"],
            r["rank"],
            f"{r['position']} of {r['of']}",
            r["class_name"],
            *(cell(r[m], r[f"{m}_std"]) for m in ("accuracy", "far", "frr")),
            int(r["seeds"]),
        ]
        for _, r in ranked.iterrows()
    ]
    headers = ["loss", "dims", "split", "", "rank", "category", "Acc.", "FAR", "FRR", "seeds"]
    text = (
        f"# {table}: the {BEST_WORST} best and worst categories per loss and split\n\n"
        "Pair verification per category (10 positive + 10 negative pairs per test image), x100, "
        "mean ± std over seeds, ranked by mean accuracy.\n\n"
        + _github(rows, headers)
        + categories_paper(part["dataset"].iloc[0])
    )
    return {
        f"{table}-categories.md": text.encode(),
        f"{table}-categories.csv": ranked.to_csv(index=False, float_format=FLOAT).encode(),
    }


# ---------------------------------------------------------------- figures


def examples_frame(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3's data: test accuracy against training examples per class (the run's
    train_per_class; for 'all', the median class size of its saved training embeddings)."""
    runs = _classified(part)
    runs = runs[~_frozen(runs) & ~_fixed_weights(runs)]
    examples = runs["train_per_class"].astype(float)
    every = examples == 0
    examples[every] = runs.loc[every, "path"].map(median_class_size)
    frame = pd.DataFrame(
        {
            "method": variant_labels(runs, ["train_per_class"]),
            "train_per_class": examples,
            "accuracy": _column(runs, "accuracy").astype(float),
        }
    )
    return frame.dropna()


def median_class_size(run_dir: Path) -> float:
    path = Path(run_dir) / store.TRAIN_EMBEDDINGS
    if not path.is_file():
        return float("nan")
    with np.load(path) as saved:
        return float(np.median(np.unique(saved["labels"], return_counts=True)[1]))


def neighbours_frame(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4a's data: NNGK runs' k with their test accuracy (classify) or R@1."""
    runs = _trained(part)
    runs = runs[(runs["loss"] == "nngk") & _column(runs, "param_k").notna()]
    metric = "accuracy" if len(_classified(runs)) == len(runs) and len(runs) else "recall@1"
    return pd.DataFrame(
        {
            "method": variant_labels(runs, ["param_k"]),
            "dims": runs["dims"],
            "k": _column(runs, "param_k").astype(float),
            metric: runs[metric].astype(float),
        }
    )


def centre_history(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4b/4c's data: the history.csv of every NNGK run that logged centre statistics,
    stacked with `run` = its name and size."""
    frames = []
    for _, run in _trained(part)[lambda d: d["loss"] == "nngk"].iterrows():
        path = Path(run["path"]) / store.HISTORY
        history = pd.read_csv(path) if path.is_file() else pd.DataFrame()
        if "mean_centre_distance" in history:
            frames.append(history.assign(run=f"{run['name']}, d{run['dims']}"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_numbers(path: Path, columns: Sequence[str]) -> pd.DataFrame | None:
    """A run's CSV table with these numeric columns; None where the run has none; a ValueError
    naming the file where a column is missing or not numbers."""
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    bad = [c for c in columns if c not in frame or not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise ValueError(f"{path.parent.name}/{path.name}: column {', '.join(bad)} is not numbers")
    return frame


def read_pr(run_dir: Path, split: str) -> pd.DataFrame | None:
    return read_numbers(Path(run_dir) / f"pr_{split}.csv", ["precision", "recall", "threshold"])


def first_seeds(part: pd.DataFrame) -> pd.DataFrame:
    """The trained run with the lowest seed of each name and size."""
    runs = _trained(part).sort_values(["name", "dims", "seed", "run"])
    return runs.drop_duplicates(["name", "dims"])


def pr_panels(part: pd.DataFrame) -> dict[str, dict[str, pd.DataFrame]]:
    """Seen and unseen precision-recall curves, a line per loss and size (lowest seed)."""
    panels: dict[str, dict[str, pd.DataFrame]] = {}
    for _, run in first_seeds(part).iterrows():
        for split in SPLITS:
            curve = read_pr(run["path"], split)
            if curve is not None:
                label = f"{run['name']}, d{run['dims']}, seed {run['seed']}"
                panels.setdefault(f"{split} pairs", {})[label] = curve
    return panels


def distance_panels(part: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per loss and size (lowest seed) and split, its test pairs' distances (pairs_*.csv)."""
    panels = {}
    for _, run in first_seeds(part).iterrows():
        for split in SPLITS:
            pairs = read_numbers(Path(run["path"]) / f"pairs_{split}.csv", ["distance", "same"])
            if pairs is not None:
                title = f"{run['name']}, d{run['dims']}, seed {run['seed']}: {split}"
                panels[title] = figures.distance_frame(pairs["distance"], pairs["same"] == 1)
    return panels


def tsne_runs(part: pd.DataFrame) -> pd.DataFrame:
    """One run per loss (and miner) with saved test embeddings, at the size and seed that most
    losses share; of a loss's variants, the one with the most runs in the table."""
    runs = _trained(part)
    runs = runs[runs["path"].map(lambda p: (Path(p) / store.EMBEDDINGS).is_file())]
    if not len(runs):
        return runs
    dims, seed = runs.groupby(["dims", "seed"], sort=True)["method"].nunique().idxmax()
    runs = runs.assign(_runs=runs["name"].map(runs["name"].value_counts()))
    runs = runs[(runs["dims"] == dims) & (runs["seed"] == seed)]
    order = ["method", "_runs", "name", "run"]
    runs = runs.sort_values(order, ascending=[True, False, True, True], kind="stable")
    return runs.drop_duplicates("method").drop(columns="_runs")


def tsne_inputs(part: pd.DataFrame) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """tsne_runs' test embeddings of the same test points (at most TSNE_POINTS, the same for
    every run), their labels and titles; nothing when fewer than two losses have them."""
    xs, labels, titles = [], None, []
    for _, run in tsne_runs(part).iterrows():
        with np.load(Path(run["path"]) / store.EMBEDDINGS) as saved:
            x, y = subsample(saved["embeddings"], saved["labels"], TSNE_POINTS)
        if labels is None or np.array_equal(y, labels):
            xs.append(x)
            labels = y
            titles.append(f"{run['name']}, d{run['dims']}, seed {run['seed']}")
    return (xs, labels, titles) if len(xs) >= 2 else ([], np.zeros(0), [])


def examples_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-accuracy-vs-examples.png (seed 000 Fig. 3), where the runs differ in it."""
    examples = examples_frame(part)
    if examples["train_per_class"].nunique() < 2:
        return {}
    return {f"{table}-accuracy-vs-examples.png": figures.accuracy_vs_examples(examples)}


def neighbours_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-neighbours.png (seed 000 Fig. 4a), where NNGK runs differ in k."""
    frame = neighbours_frame(part)
    if frame["k"].nunique() < 2:
        return {}
    return {f"{table}-neighbours.png": figures.neighbours_effect(frame, frame.columns[-1])}


def centres_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-centres.png (seed 000 Fig. 4b/4c) from NNGK runs' history.csv."""
    history = centre_history(part)
    if not len(history):
        return {}
    return {f"{table}-centres.png": figures.centre_statistics(history, hue="run")}


def pair_figures(part: pd.DataFrame, table: str) -> Files:
    """<table>-pair-distances.png and <table>-pr.png (seed 004) from pairs runs' pr_*.csv."""
    panels = distance_panels(part)
    if not panels:
        return {}
    return {
        f"{table}-pair-distances.png": figures.pair_distance_figure(panels),
        f"{table}-pr.png": figures.pr_curve_panels(pr_panels(part)),
    }


def mprec_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-mprec.png: mprec@K against K per method and size (seed 002) from mprec.csv."""
    frames = [
        curve.assign(method=run["method"], dims=run["dims"])
        for _, run in part.iterrows()
        if (curve := read_numbers(Path(run["path"]) / "mprec.csv", ["K", "mprec"])) is not None
    ]
    if not frames:
        return {}
    return {f"{table}-mprec.png": figures.mprec_curves(pd.concat(frames, ignore_index=True))}


def tsne_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-tsne.png: yoked t-SNE of several losses' test embeddings (seed 003)."""
    xs, labels, titles = tsne_inputs(part)
    if not xs:
        return {}
    layouts = figures.yoked_tsne(xs)
    return {f"{table}-tsne.png": figures.yoked_tsne_figure(layouts, labels, titles)}


# ---------------------------------------------------------------- the report

TABLE_BUILDERS: tuple[Callable[[pd.DataFrame, str], Files], ...] = (
    embedding_files,
    train_test_files,
    categories_files,
    examples_figure,
    neighbours_figure,
    centres_figure,
    pair_figures,
    mprec_figure,
    tsne_figure,
)
KINDS = {
    "<table>.md": "embedding results per loss and size (seed 000 Tables 1-2); published numbers",
    "<table>.csv": "the same, as numbers",
    "<table>.png": "R@1 and NMI against embedding size (seed 000 Fig. 2a/b)",
    "<table>-paper.csv": "the papers' published numbers for this data set and protocol",
    "<table>-recall-at-k.png": "Recall@K against K per size (seed 000 Fig. 2c/d)",
    "<table>-train-test.md": "R@1 per embedding (FC, GAP) on training and test (seed 003 Table 1)",
    "<table>-train-test.csv": "the same, as numbers",
    "<table>-categories.md": "best and worst categories per loss and split (seed 004 Table 3)",
    "<table>-categories.csv": "the same, as numbers",
    "<table>-accuracy-vs-examples.png": "test accuracy against examples per class (Fig. 3)",
    "<table>-neighbours.png": "NNGK: the effect of the number of neighbours k (Fig. 4a)",
    "<table>-centres.png": "NNGK: distance and kernel value to nearest centres (Fig. 4b/4c)",
    "<table>-pair-distances.png": "distances of similar and dissimilar test pairs (seed 004)",
    "<table>-pr.png": "precision-recall of seen and unseen test pairs (seed 004 Fig. 11b)",
    "<table>-mprec.png": "seed 002's mprec@K against K per method, a panel per size",
    "<table>-tsne.png": "yoked t-SNE of the losses' test embeddings (seed 003)",
    f"{CLASSIFICATION}.md": "test accuracy per backbone and loss (seed 000 Tables 3-5)",
    f"{CLASSIFICATION}.csv": "Tables 3-4 as numbers",
    f"{CLASSIFICATION}-ablation.csv": "Table 5 (learned/fixed weights, trained/frozen backbone)",
}


def _build(
    name: str, runs: pd.DataFrame, builders: Sequence[Callable], problems: list[str]
) -> Files:
    files: Files = {}
    for builder in builders:
        try:
            files.update(builder(runs, name))
        except Exception as err:  # a damaged run file never stops the report
            problems.append(f"{name}: {builder.__name__} left out ({type(err).__name__}: {err})")
    return files


def pattern(group: str, file_name: str) -> str:
    """A written file's kind: `<table>-tsne.png` for digits-tsne.png."""
    return file_name if group == CLASSIFICATION else "<table>" + file_name.removeprefix(group)


INDEX_TITLE, INDEX_GENERATED = "# Reports", "Generated by `nngk-bench report`"


def index_text(results: Path, groups: dict[str, Files]) -> str:
    """README.md: the files of each table, then what each kind of file holds."""
    lines = [INDEX_TITLE, "", f"{INDEX_GENERATED} from `{results}`.", ""]
    lines += [f"- {g}: " + ", ".join(f"[{n}]({n})" for n in f) for g, f in groups.items() if f]
    kinds = dict.fromkeys(pattern(g, n) for g, files in groups.items() for n in files)
    if not kinds:
        return "\n".join([*lines, "No finished runs."]) + "\n"
    lines += ["", "## Files", "", *(f"- `{k}`: {KINDS.get(k, '')}" for k in kinds)]
    return "\n".join(lines) + "\n"


def indexed_files(out: Path) -> set[str]:
    """The files an earlier report indexed in `out`/README.md (none if that is not ours)."""
    readme = Path(out) / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    if not text.startswith(f"{INDEX_TITLE}\n\n{INDEX_GENERATED}"):
        return set()
    return set(re.findall(r"\]\(([^)/]+)\)", text))


def remove_stale(out: Path, previous: set[str], written: Sequence[Path]) -> list[Path]:
    """Remove what an earlier report wrote and this one did not (a table whose runs are gone),
    so that `out` holds one report; files the report never wrote are left alone."""
    stale = sorted(previous - {p.name for p in written})
    for name in stale:
        (Path(out) / name).unlink(missing_ok=True)
    return [Path(out) / name for name in stale]


def write_report(results: Path, out: Path) -> tuple[list[Path], list[str]]:
    """Per table: the files of TABLE_BUILDERS; across classify tables: classification.md,
    .csv and -ablation.csv; README.md indexing them all."""
    df, problems = load_runs(results)
    out = Path(out)
    tables = sorted(df.loc[df["loss"] != BASELINE_LOSS, "table"].unique()) if len(df) else []
    parts = {t: df[df["table"] == t] for t in tables}  # a baseline alone makes no table
    groups = {t: _build(t, p, TABLE_BUILDERS, problems) for t, p in parts.items()}
    if len(df):
        groups[CLASSIFICATION] = _build(CLASSIFICATION, df, [classification_files], problems)
    written = []
    for files in groups.values():
        for file_name, data in files.items():
            atomic_write_bytes(out / file_name, data)
            written.append(out / file_name)
    readme = out / "README.md"
    atomic_write_text(readme, index_text(results, groups))
    written.append(readme)
    return written, problems
