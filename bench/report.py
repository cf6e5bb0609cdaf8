"""Comparison tables and plots, read only from finished run folders."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from tabulate import tabulate  # noqa: E402

from bench import store  # noqa: E402
from bench.config import safe_name  # noqa: E402
from bench.evaluate import METRIC_KEYS  # noqa: E402
from bench.figures import recall_at_k_curves  # noqa: E402
from bench.reference import reference_rows  # noqa: E402

BASELINE_LOSS = "untrained"
RAW_BASELINE = f"{BASELINE_LOSS} (raw inputs)"
PROTOCOL_COLUMNS = {
    "accuracy": "Accuracy",
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


def load_runs(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run; problems name the folders that were skipped."""
    runs, problems = store.scan_runs(results)
    rows = []
    for run_dir, metrics in runs:
        missing = [k for k in (*METRIC_KEYS, "dataset", "loss", "dims", "seed") if k not in metrics]
        if missing:
            problems.append(f"{run_dir.name}: metrics.json lacks {', '.join(missing)}")
            continue
        init = metrics.get("untrained_network") or {}
        protocol = metrics.setdefault("protocol", "metric")
        table = safe_name(metrics["dataset"])
        table = table if protocol == "metric" else f"{table}-{protocol}"
        rows.append(
            {**metrics, "run": run_dir.name, "init_map@r": init.get("map@r"), "table": table}
        )
    df = pd.DataFrame(rows)
    if len(df):
        df["miner"] = df.get("miner", pd.Series([None] * len(df))).fillna("")
        df["method"] = df["loss"] + df["miner"].map(lambda m: f" ({m})" if m else "")
        df.loc[df["loss"] == BASELINE_LOSS, "method"] = RAW_BASELINE
    return df, problems


def protocol_metrics(df: pd.DataFrame) -> list[str]:
    """The protocol's own metrics that these runs have (classify: accuracy; pairs: seen and
    unseen verification), shown after the retrieval metrics."""
    return [m for m in PROTOCOL_COLUMNS if m in df and df[m].notna().any()]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per method and embedding size, baseline first."""
    grouped = df.groupby(["method", "dims"], sort=True)
    table = grouped[[*METRIC_KEYS, *protocol_metrics(df), "init_map@r"]].agg(["mean", "std"])
    table.columns = [f"{m}_{s}" for m, s in table.columns]
    table["runs"] = grouped.size()
    table = table.reset_index()
    table["_order"] = (table["method"] != RAW_BASELINE).astype(int)
    return table.sort_values(["_order", "method", "dims"]).drop(columns="_order")


def cell(mean: float, std: float) -> str:
    if pd.isna(mean):
        return "-"
    text = f"{100 * mean:.2f}"
    return text if pd.isna(std) else f"{text} ± {100 * std:.2f}"


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
    body = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    return (
        f"# {dataset}: embedding results on the test split\n\n"
        "Metrics x100, mean ± std over seeds (runs = number of seeds). The untrained row "
        "evaluates the raw test inputs; MAP@R at init is each run's network before any "
        "training, evaluated the same way.\n\n" + body + "\n"
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
            *("" if pd.isna(r[m]) else f"{100 * r[m]:.2f}" for m in metrics),
        ]
        for _, r in papers.iterrows()
    ]
    headers = ["source", "method", "dims", "setting", *(COLUMNS.get(m, m) for m in metrics)]
    return (
        "\n## Published numbers (from the papers, not measured here)\n\n"
        + tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
        + "\n"
    )


def plot(df: pd.DataFrame, dataset: str) -> bytes:
    trained = df[df["loss"] != BASELINE_LOSS]
    baseline = df[df["loss"] == BASELINE_LOSS]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, key in zip(axes, ("recall@1", "nmi"), strict=True):
        if len(trained):
            sns.lineplot(
                data=trained,
                x="dims",
                y=key,
                hue="method",
                marker="o",
                errorbar="sd",
                ax=ax,
                hue_order=sorted(trained["method"].unique()),
            )
        if len(baseline):
            ax.axhline(baseline[key].mean(), color="gray", linestyle="--", label=RAW_BASELINE)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dataset}: {COLUMNS[key]} against embedding size")
        ax.set_ylabel(COLUMNS[key])
        ax.set_xticks(sorted(df["dims"].unique()), labels=sorted(df["dims"].unique()))
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write_report(results: Path, out: Path) -> tuple[list[Path], list[str]]:
    """Per data set: <dataset>.md, .csv and .png; and README.md indexing them."""
    df, problems = load_runs(results)
    out = Path(out)
    written: list[Path] = []
    index = ["# Reports", "", f"Generated by `nngk-bench report` from `{results}`.", ""]
    for dataset in sorted(df["table"].unique()) if len(df) else []:
        part = df[df["table"] == dataset]
        summary = summarise(part)
        papers = paper_table(part["dataset"].iloc[0], part["protocol"].iloc[0])
        files = {
            out / f"{dataset}.md": (
                markdown_table(summary, dataset) + paper_markdown(papers)
            ).encode(),
            out / f"{dataset}.csv": summary.to_csv(index=False, float_format="%.6f").encode(),
            out / f"{dataset}.png": plot(part, dataset),
        }
        if len(papers):
            files[out / f"{dataset}-paper.csv"] = papers.to_csv(index=False).encode()
        trained = part[part["loss"] != BASELINE_LOSS]
        if len(trained):  # seed 000 Fig. 2c, 2d
            files[out / f"{dataset}-recall-at-k.png"] = recall_at_k_curves(trained)
        for path, data in files.items():
            store.atomic_write_bytes(path, data)
            written.append(path)
        index.append(f"- {dataset}: " + ", ".join(f"[{p.name}]({p.name})" for p in files))
    if not len(df):
        index.append("No finished runs.")
    readme = out / "README.md"
    store.atomic_write_text(readme, "\n".join(index) + "\n")
    written.append(readme)
    return written, problems
