"""The main table of a data set: retrieval metrics per loss and size (Meyer et al. 2018 Tables 1-2),
the published numbers beside it, R@1 and NMI against size (Fig. 2a/b) and Recall@K (Fig. 2c/d)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.evaluation.metrics import retrieval_keys
from bench.evaluation.retrieval import R_PRECISION
from bench.protocols import get_protocol
from bench.report import figures
from bench.report.answer import answer_text
from bench.report.reference import reference_rows
from bench.report.runs import (
    BASELINE_LOSS,
    column_or_nan,
    regime_labels,
    shown_metrics,
    trained_runs,
)
from bench.report.setup import setup_columns, setup_line
from bench.report.significance import MIN_SEEDS, REPLICATES, compare_rows, t_halfwidth
from bench.report.table_format import (
    INTERVAL,
    PROTOCOL_COLUMNS,
    Files,
    cell,
    column_label,
    csv_bytes,
    github_table,
    one_per_seed,
    percent,
)


def protocol_metrics(df: pd.DataFrame) -> list[str]:
    """The protocol's own metrics that these runs have (classify: accuracy; pairs: seen and
    unseen verification), shown after the retrieval metrics."""
    return [m for m in PROTOCOL_COLUMNS if m in df and df[m].notna().any()]


KEYS = ["name", "dims"]
RANKED_BY = ("map@r", "recall@1")  # what orders a table's trained rows, the first recorded
RETRIEVAL = ("recall@1", "map@r")  # a NaN here: a run gone wrong


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per method (with its varying settings) and size, baseline first;
    `runs` counts distinct seeds (copies of a seed are one run), `nan_runs` those of them with
    a NaN metric, which is left out of the mean, not averaged in."""
    values = [*shown_metrics(df), *protocol_metrics(df), "init_map@r"]
    diverged = column_or_nan(df, "diverged", None).map(lambda d: isinstance(d, str) and bool(d))
    df = df.assign(**{v: df[v].astype(float) for v in values}, _diverged=diverged.astype(float))
    seeds = one_per_seed(df, KEYS, [*values, "_diverged"])
    grouped = seeds.groupby(KEYS, sort=True)
    table = grouped[values].agg(["mean", "std", t_halfwidth])
    table.columns = [f"{m}_{'ci' if s == 't_halfwidth' else s}" for m, s in table.columns]
    table["runs"] = grouped.size()
    table["diverged_runs"] = grouped["_diverged"].apply(lambda d: int((d > 0).sum()))
    table["nan_runs"] = (
        seeds[list(RETRIEVAL)].isna().any(axis=1).groupby([seeds[k] for k in KEYS]).sum()
    )
    table = table.reset_index().merge(setup_columns(df, ["name", "dims"]), on=["name", "dims"])
    table = table.rename(columns={"name": "method"})
    baselines = set(df.loc[df["loss"] == BASELINE_LOSS, "name"])
    family = column_or_nan(df, "family", "").fillna("").groupby(df["name"]).first()
    table["family"] = table["method"].map(family).fillna("")
    table = ranked_rows(table, baselines)
    # One family (every table before today's losses): no column for it.
    return (
        table if table["family"].replace("", np.nan).nunique() > 1 else table.drop(columns="family")
    )


def ranked_rows(table: pd.DataFrame, baselines: set[str]) -> pd.DataFrame:
    """The baselines first, then each size's trained rows by the ranking metric (`RANKED_BY`:
    MAP@R, else R@1 where no run has MAP@R), best first; ties by name."""
    by = next((m for m in RANKED_BY if table[f"{m}_mean"].notna().any()), RANKED_BY[-1])
    order = table.assign(
        _trained=table["method"].isin(baselines).map({True: 0, False: 1}),
        _score=-table[f"{by}_mean"].fillna(-np.inf),
    )
    keys = ["_trained", "dims", "_score", "method"]
    return order.sort_values(keys, kind="stable").drop(columns=["_trained", "_score"])


def marks_of(differences: pd.DataFrame) -> dict[tuple[str, int, str], tuple[bool, str]]:
    """(name, dims, metric) -> (bold: the best row, significantly above the second; '▲' or
    '▼' where significantly above or below the reference row, else '')."""
    marks = {}
    for r in differences.itertuples(index=False):
        arrow = ("▲" if r.diff > 0 else "▼") if r.significant else ""
        marks[(r.name, int(r.dims), r.metric)] = (bool(r.beats_second), arrow)
    return marks


def marked(text: str, mark: tuple[bool, str]) -> str:
    bold, arrow = mark
    text = f"**{text}**" if bold else text
    return f"{text} {arrow}" if arrow else text


def markdown_table(
    summary: pd.DataFrame,
    dataset: str,
    setup: str,
    differences: pd.DataFrame,
    baselines: frozenset[str],
    answer: str,
) -> str:
    """The table under its answer (`bench.report.answer`) and setup, its legend below it."""
    extra = [m for m in PROTOCOL_COLUMNS if f"{m}_mean" in summary]
    shown = retrieval_keys(c.removesuffix("_mean") for c in summary.columns if c.endswith("_mean"))
    keys = (*shown, *extra, "init_map@r")
    marks = marks_of(differences)
    nans = "nan_runs" in summary and summary["nan_runs"].gt(0).any()
    diverged = "diverged_runs" in summary and summary["diverged_runs"].gt(0).any()
    families = "family" in summary
    rows = [
        [
            r["method"],
            *([r["family"]] if families else []),
            int(r["dims"]),
            *(
                marked(
                    cell(r[f"{k}_mean"], r[f"{k}_ci"]),
                    marks.get((r["method"], r["dims"], k), (False, "")),
                )
                for k in keys
            ),
            int(r["runs"]),
            *([int(r["nan_runs"])] if nans else []),
            *([int(r["diverged_runs"])] if diverged else []),
        ]
        for _, r in summary.iterrows()
    ]
    headers = [
        "loss",
        *(["family"] if families else []),
        "dims",
        *(column_label(k) for k in shown),
        *(PROTOCOL_COLUMNS[m] for m in extra),
        "MAP@R at init",
        "runs",
        *(["runs with NaN (left out)"] if nans else []),
        *(["runs that diverged (best epoch before it)"] if diverged else []),
    ]
    return (
        f"# {dataset}: embedding results on the test split\n\n"
        + (f"{answer}\n" if answer else "")
        + (f"{setup}\n\n" if setup else "")
        + github_table(rows, headers)
        + f"\nMetrics x100, {INTERVAL}. Rows: the baselines, then each size's trained rows by "
        "MAP@R (R@1 where no run has it), best first. runs = distinct seeds; copies of a seed "
        "count once, as their mean. "
        + (significance_note(differences) if len(differences) else "")
        + "NMI: one k-means run, as PML's AccuracyCalculator computes it (faiss, 20 "
        "iterations); NMI (best of 5): the best of 5 restarts, what earlier versions called "
        "NMI (runs recorded by them show only that); runs tested with `--clustering none` "
        "have no NMI. Baselines: raw inputs "
        "(the test inputs as given, flattened and L2-normalised; images area-averaged to at "
        "most 32x32) and the untrained network (the backbone's features before any metric "
        "training, L2-normalised). MAP@R at init is each run's own network before training, "
        "evaluated the same way.\n"
        + below_baselines_note(summary, baselines)
        + untested_note(summary, differences, baselines)
    )


def below_baselines_note(summary: pd.DataFrame, baselines: frozenset[str]) -> str:
    """The trained rows that do not clear both baselines on MAP@R: the lower end of their
    interval (with one seed, their value) at or below the better baseline's; '' where none."""
    is_base = summary["method"].isin(baselines)
    if not is_base.any() or is_base.all() or "map@r_mean" not in summary:
        return ""
    bar = summary.loc[is_base, "map@r_mean"].max()
    trained = summary[~is_base]
    low = trained["map@r_mean"] - trained["map@r_ci"].fillna(0)
    below = trained[(low <= bar) | trained["map@r_mean"].isna()]
    if not len(below):
        return ""
    named = "; ".join(
        f"{r['method']} {int(r['dims'])}-d ({cell(r['map@r_mean'], r['map@r_ci'])})"
        for _, r in below.iterrows()
    )
    return (
        f"\nNot above both baselines on MAP@R (the lower end of the row's interval, or its one "
        f"seed's value, at or below the better baseline's {percent(bar)}): {named}.\n"
    )


def untested_note(
    summary: pd.DataFrame, differences: pd.DataFrame, baselines: frozenset[str]
) -> str:
    """The trained rows of two seeds or more that no comparison tested (their runs' per-query
    scores are missing, or their test queries differ from the other rows'); '' where none. A
    row alone at its size has nothing to be compared with, and is not named."""
    trained = summary[~summary["method"].isin(baselines)]
    alone = trained["dims"].map(trained["dims"].value_counts()) == 1
    trained = trained[~alone & (trained["runs"] >= MIN_SEEDS)]
    tested = set(zip(differences["name"], differences["dims"].astype(int), strict=True))
    left = [r for _, r in trained.iterrows() if (r["method"], int(r["dims"])) not in tested]
    if not left:
        return ""
    named = "; ".join(f"{r['method']} {int(r['dims'])}-d" for r in left)
    return (
        f"\nNot tested for significance, no marks: {named} (a run of the row, or of every "
        "other row of its size, saved no test embeddings, or its test queries differ from the "
        "rest of its size's).\n"
    )


def significance_note(differences: pd.DataFrame) -> str:
    refs = differences.groupby("dims")["reference"].agg(lambda r: ", ".join(sorted(set(r))))
    named = "; ".join(f"{d}-d: {names}" for d, names in refs.items())
    # Runs recorded R-Precision from issue 45 on; tables of earlier runs read as they did.
    marked = "R@K, R-Precision" if R_PRECISION in set(differences["metric"]) else "R@K"
    return (
        "▲/▼: significantly above/below the reference row of its size and column "
        f"(`report --reference`, else the column's best trained row; {named}), by a "
        f"bootstrap over test queries and seeds ({REPLICATES:,} replicates, 95 %) confirmed "
        f"by Welch's t-test over the seeds (p < 0.05); only between rows of {MIN_SEEDS} seeds "
        "or more (a row of one seed is never marked: another seed moves it more than its test "
        "queries do); **bold**: the best row of a column, significantly above the second. "
        f"{marked} and MAP@R only: NMI has no per-query score. "
    )


def paper_table(dataset: str, protocol: str) -> pd.DataFrame:
    """The papers' published numbers for this data set and protocol, one row per paper row."""
    ref = reference_rows(dataset, protocol)
    if not len(ref):
        return ref
    backbone = ref["backbone"].fillna("").replace("", "not stated")
    ref = ref.assign(dims=ref["dims"].astype("string").fillna(""), backbone=backbone)
    keys = ["paper", "table", "method", "backbone", "dims", "setting"]
    wide = ref.pivot_table(index=keys, columns="metric", values="value", aggfunc="first")
    order = [*retrieval_keys(wide.columns), *(m for m in ("accuracy", "far", "frr") if m in wide)]
    return wide[order].reset_index()


def paper_markdown(papers: pd.DataFrame) -> str:
    if not len(papers):
        return ""
    keys = ("paper", "table", "method", "backbone", "dims", "setting")
    metrics = [c for c in papers.columns if c not in keys]
    rows = [
        [
            f"paper: {r['paper']}, {r['table']}",
            r["method"],
            r["backbone"],
            r["dims"],
            r["setting"],
            *(percent(r[m]) for m in metrics),
        ]
        for _, r in papers.iterrows()
    ]
    headers = ["source", "method", "backbone", "dims", "setting"]
    headers += [column_label(m) for m in metrics]
    return (
        "\n## Published numbers (from the papers, not measured here)\n\n"
        "Each paper's own setup (its backbone, input and training) is not the one above.\n\n"
        + github_table(rows, headers)
    )


def dims_figure(part: pd.DataFrame) -> bytes:
    """R@1 and NMI against embedding size, a line per method, the baselines as grey lines
    (Meyer et al. 2018 Fig. 2a/b)."""
    trained, baseline = trained_runs(part), part[part["loss"] == BASELINE_LOSS]
    data = trained if len(trained) else part
    metrics = ["recall@1", "nmi"]
    lines = baseline.groupby("method", sort=True)[metrics].mean() if len(trained) else []
    lines = {label: dict(values) for label, values in lines.iterrows()} if len(lines) else {}
    # Settings that vary (backbone, validation split, ...) get a row of panels each; a
    # loss's tuned settings stay in the table.
    variant = regime_labels(data)
    if variant.nunique() > 1:
        data = data.assign(variant=variant)
        return figures.metrics_vs_dims(data, ["recall@1", "nmi"], lines, panel="variant")
    return figures.metrics_vs_dims(data.assign(method=data["name"]), ["recall@1", "nmi"], lines)


def embedding_files(part: pd.DataFrame, table: str, reference: str | None = None) -> Files:
    """<table>.md, .csv, .png, -paper.csv and -recall-at-k.png (Meyer et al. 2018 Tables 1-2, Fig.
    2)."""
    summary, trained = summarise(part), trained_runs(part)
    papers = paper_table(part["dataset"].iloc[0], part["protocol"].iloc[0])
    differences = compare_rows(trained, reference)
    baselines = frozenset(part.loc[part["loss"] == BASELINE_LOSS, "name"])
    answer = answer_text(summary, differences, trained)
    note = get_protocol(part["protocol"].iloc[0]).retrieval_note  # pairs: the seen classes'
    setup = setup_line(part) + (f"\n\n{note}" if note else "")
    text = markdown_table(summary, table, setup, differences, baselines, answer)
    files = {
        f"{table}.md": (text + paper_markdown(papers)).encode(),
        f"{table}.csv": csv_bytes(summary),
        f"{table}.png": dims_figure(part),
    }
    if len(differences):
        files[f"{table}-differences.csv"] = csv_bytes(differences)
    if len(papers):
        files[f"{table}-paper.csv"] = papers.to_csv(index=False).encode()
    if len(trained):
        files[f"{table}-recall-at-k.png"] = recall_figure(trained)
    return files


def recall_figure(trained: pd.DataFrame) -> bytes:
    """Recall@K, a panel per method and a line per size; where settings vary (a start, a
    fold, a swept learning rate), a line per size and setting in the method's panel."""
    settings = regime_labels(trained)
    if settings.nunique() <= 1:
        return figures.recall_at_k_curves(trained.assign(method=trained["name"]))
    size = trained["dims"].astype(int).astype(str) + "-d"
    line = size.where(settings == "", size + ", " + settings)
    key = "size, setting"
    return figures.recall_at_k_curves(trained.assign(**{key: line}), line=key)
