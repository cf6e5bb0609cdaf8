"""The papers' figures as pure functions: arrays and tables in, PNG bytes out.

The caller reads the run folders; nothing here touches the disk. Every figure is drawn with
the Agg backend at a fixed dpi and saved without the software tag, so the same input gives
the same bytes.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullLocator  # noqa: E402

from bench.evaluation.metrics import recall_k  # noqa: E402
from bench.report.colours import hue_colours, line_colours, method_colour  # noqa: E402
from bench.report.table_format import column_label  # noqa: E402

DPI = 100
PANEL = (4.2, 3.6)  # inches per panel
SAME_CLASS_COLOUR = "tab:cyan"  # Liu et al. 2019 Fig. 2: closer to the same class
OTHER_CLASS_COLOUR = "tab:orange"
TRAIN_COLOUR = "tab:red"  # Liu et al. 2019 Fig. 1a: training red, test blue
TEST_COLOUR = "tab:blue"
# the Tiny ImageNet pair-verification report, Fig. 12: similar pairs blue
SIMILAR_COLOUR = "tab:blue"
DISSIMILAR_COLOUR = "tab:orange"


# ---------------------------------------------------------------- drawing helpers


@contextmanager
def figure_style() -> Iterator[None]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.8):
        yield


def subplots(panels: int, sharey: bool = False, per_row: int = 4) -> tuple[Figure, np.ndarray]:
    """`panels` axes, at most `per_row` to a row (the unused ones of the last row hidden)."""
    ncols = min(panels, per_row)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(PANEL[0] * ncols, PANEL[1] * nrows),
        squeeze=False,
        sharey=sharey,
        layout="constrained",
    )
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, axes.flat[:panels]


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


def _log2_axis(ax: Axes, values: Sequence[float]) -> None:
    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def _integer_axis(ax: Axes, values: Sequence[float], most: int = 12) -> None:
    """Ticks at the values where there are few of them, else at integers only."""
    ticks = sorted(set(values))
    if len(ticks) <= most:
        ax.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"the table lacks {', '.join(missing)}")
    if not len(df):
        raise ValueError("the table has no rows")


TITLE_WIDTH = 40  # characters of a panel's title line that fit over it


LONG_LABEL = 40  # characters of a legend label that sends the legend under its axes


def mean_sd_lines(
    ax: Axes,
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    order: Sequence | None = None,
    palette: Mapping | None = None,
    legend: bool = True,
) -> None:
    """A line per value of `hue` (in `order`; one line without it): the mean of `y` at each
    `x`, with a band of one standard deviation (ddof 1; none where one row) around it, as
    seaborn's lineplot(errorbar="sd") draws; the statistics by one pandas groupby, since
    seaborn's per-line aggregation grew with the runs and made most of a report's time over
    many runs. legend=False: none on the axes (the figure's, `figure_legend`, instead)."""
    keys = [x] if hue is None else [hue, x]
    table = df.groupby(keys, sort=True)[y].agg(["mean", "std"]).dropna(subset=["mean"])
    if hue is None:
        groups = [(None, table)]
    else:
        order = list(order) if order is not None else sorted(df[hue].unique())
        found = set(table.index.get_level_values(0))
        groups = [(v, table.xs(v, level=0) if v in found else table.iloc[:0]) for v in order]
    colours = hue_colours([value for value, _ in groups])
    for i, (value, stats) in enumerate(groups):
        if not len(stats):
            continue
        colour = palette[value] if palette is not None else colours[i]
        label = None if hue is None else str(value)
        ax.plot(stats.index, stats["mean"], marker="o", color=colour, label=label)
        low, high = stats["mean"] - stats["std"], stats["mean"] + stats["std"]
        ax.fill_between(stats.index, low, high, color=colour, alpha=0.2, linewidth=0)
    ax.set(xlabel=x, ylabel=y)
    handles, labels = ax.get_legend_handles_labels()
    if legend and hue is not None and handles:
        # Long labels (a tuned setting with its start and parameters) go under the axes,
        # where they would otherwise squeeze the plot to nothing.
        below = max(map(len, labels)) > LONG_LABEL
        where = dict(loc="upper center", bbox_to_anchor=(0.5, -0.2)) if below else {}
        ax.legend(fontsize=7, title=hue, title_fontsize=7, **where)


# ---------------------------------------------------------------- result curves


def recall_at_k_curves(df: pd.DataFrame, line: str = "dims") -> bytes:
    """Recall@K against K, a panel per method and a line per embedding size (Meyer et al. 2018 Fig.
    2c/d), or per value of another column (`line`, e.g. a size with its start).

    Columns: method, dims (or `line`) and recall@K for any K; rows are runs, lines are mean
    and sd over the runs (seeds) of a method and line.
    """
    recalls = sorted((c for c in df.columns if recall_k(c) is not None), key=recall_k)
    if not recalls:
        raise ValueError("the table lacks recall@K columns")
    _require(df, ["method", line])
    long = df.melt(id_vars=["method", line], value_vars=recalls, var_name="K", value_name="R")
    long["K"] = long["K"].map(recall_k).astype(int)
    if line == "dims":
        values = [str(s) for s in sorted(long["dims"].astype(int).unique())]
        long["dims"] = long["dims"].astype(int).astype(str)
        palette = dict(zip(values, sns.color_palette("viridis", len(values)), strict=True))
    else:
        values = sorted(long[line].astype(str).unique())
        long[line] = long[line].astype(str)
        palette = dict(zip(values, line_colours(len(values)), strict=True))
    methods = sorted(long["method"].unique())
    with figure_style():
        fig, axes = subplots(len(methods), sharey=True)
        parts = dict(iter(long.groupby("method", sort=True)))
        for ax, method in zip(axes, methods, strict=True):
            part = parts[method]
            order = [v for v in values if v in set(part[line])]
            mean_sd_lines(ax, part, "K", "R", line, order, palette, legend=line == "dims")
            _log2_axis(ax, long["K"].unique())
            ax.set(title=method, ylabel="Recall@K")
            ax.title.set_color(method_colour(method))  # its lines are sizes: its name, its colour
        if line != "dims":  # long labels, the same in every panel: one legend under them
            figure_legend(fig, axes, "outside lower center", title=line)
        return png_bytes(fig)


def mprec_curves(df: pd.DataFrame) -> bytes:
    """mprec@K against K (Sharma et al. 2015), a panel per embedding size and a line per method.

    Columns: method, dims, K, mprec; rows are (run, K), lines are mean and sd over the runs."""
    _require(df, ["method", "dims", "K", "mprec"])
    sizes = sorted(df["dims"].unique())
    with figure_style():
        fig, axes = subplots(len(sizes), sharey=True)
        for ax, size in zip(axes, sizes, strict=True):
            mean_sd_lines(
                ax, df[df["dims"] == size], "K", "mprec", "method", sorted(df["method"].unique())
            )
            ax.set(title=f"d = {size}", ylabel="mprec@K")
        return png_bytes(fig)


BASELINE_STYLES = ("--", ":", "-.")


def metrics_vs_dims(
    df: pd.DataFrame,
    metrics: Sequence[str],
    baselines: Mapping[str, Mapping[str, float]] | None = None,
    panel: str | None = None,
) -> bytes:
    """A panel per metric against embedding size, a line per method (mean and sd over the
    rows of a method and size), one legend for all; a grey line at each baseline (its label
    -> metric -> value), dashed, dotted, then dash-dotted.
    With `panel`, a row of such panels per value of that column (e.g. a backbone and
    validation split), so that the lines of one panel stay few enough to read."""
    _require(df, ["method", "dims", *metrics, *([panel] if panel else [])])
    order = sorted(df["method"].unique())
    groups = list(df.groupby(panel, sort=True)) if panel else [("", df)]
    with figure_style():
        fig, axes = subplots(len(metrics) * len(groups), per_row=len(metrics))
        for i, (value, part) in enumerate(groups):
            row = axes[i * len(metrics) : (i + 1) * len(metrics)]
            for ax, metric in zip(row, metrics, strict=True):
                mean_sd_lines(ax, part, "dims", metric, "method", order, legend=False)
                for (label, values), style in zip(
                    (baselines or {}).items(), BASELINE_STYLES, strict=False
                ):
                    if not pd.isna(values.get(metric, np.nan)):
                        ax.axhline(values[metric], color="gray", linestyle=style, label=label)
                _log2_axis(ax, df["dims"].unique())
                title = f"{column_label(metric)} against embedding size"
                if value:
                    title = "\n".join([title, *textwrap.wrap(str(value), TITLE_WIDTH)])
                ax.set(ylabel=column_label(metric), title=title)
        figure_legend(fig, axes, "outside right upper")
        return png_bytes(fig)


def figure_legend(fig: Figure, axes: Sequence[Axes], loc: str, title: str | None = None) -> None:
    """One legend for the figure: each label of its panels once, in the order first drawn."""
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if legend:
        fig.legend(legend.values(), legend.keys(), loc=loc, fontsize=7, title=title)


def accuracy_vs_examples(df: pd.DataFrame) -> bytes:
    """Test accuracy against training examples per class, a line per method (Meyer et al. 2018 Fig.
    3)."""
    _require(df, ["method", "train_per_class", "accuracy"])
    with figure_style():
        fig, (ax,) = subplots(1)
        mean_sd_lines(ax, df, "train_per_class", "accuracy", "method")
        ax.set_xticks(sorted(df["train_per_class"].unique()))
        ax.set(xlabel="training examples per class", title="accuracy against examples per class")
        return png_bytes(fig)


def neighbours_effect(df: pd.DataFrame, metric: str) -> bytes:
    """A metric against the number of neighbours k used in training (Meyer et al. 2018 Fig. 4a).

    A line per method and embedding size where the table has those columns.
    """
    _require(df, ["k", metric])
    parts = [c for c in ("method", "dims") if c in df.columns]
    hue, order = None, None
    if parts:
        df = df.sort_values(parts, kind="stable")
        hue = ", ".join(parts)
        df = df.assign(**{hue: df[parts].astype(str).agg(", ".join, axis=1)})
        order = df[hue].unique().tolist()
    with figure_style():
        fig, (ax,) = subplots(1)
        mean_sd_lines(ax, df, "k", metric, hue, order)
        _log2_axis(ax, df["k"].unique())
        ax.set(xlabel="neighbours k", ylabel=column_label(metric))
        ax.set_title(f"{column_label(metric)} against neighbours k")
        return png_bytes(fig)


def centre_statistics(history: pd.DataFrame, hue: str | None = None) -> bytes:
    """Mean distance and kernel value to the nearest centres per epoch (Meyer et al. 2018 Fig. 4b,
    4c).

    One run's history, or several stacked with a `hue` column naming each line (mean and sd
    over the rows of a hue value and epoch, e.g. over seeds).
    """
    panels = {
        "mean_centre_distance": "mean distance to nearest centres",
        "mean_kernel_value": "mean kernel value to nearest centres",
    }
    _require(history, ["epoch", *panels, *([hue] if hue else [])])
    with figure_style():
        fig, axes = subplots(2)
        for ax, (column, title) in zip(axes, panels.items(), strict=True):
            part = history.dropna(subset=[column])
            mean_sd_lines(ax, part, "epoch", column, hue, legend=False)
            _integer_axis(ax, history["epoch"].unique())
            ax.set(xlabel="epoch", ylabel=column.replace("_", " "), title=title)
        if hue is not None:
            # One legend under both panels: the runs' names are long (start, tuned settings).
            figure_legend(fig, axes, "outside lower center", title=hue)
        return png_bytes(fig)


def _distance_panel(ax: Axes, frame: pd.DataFrame, title: str) -> None:
    """Histograms of a frame's `distance` per `pair` (similar, dissimilar), each normalised to
    unit area, with the means dashed and in the title."""
    colours = {"similar": SIMILAR_COLOUR, "dissimilar": DISSIMILAR_COLOUR}
    order = [p for p in colours if (frame["pair"] == p).any()]
    means = {pair: float(frame.loc[frame["pair"] == pair, "distance"].mean()) for pair in order}
    sns.histplot(
        data=frame,
        x="distance",
        hue="pair",
        hue_order=order,
        palette=colours,
        stat="density",
        common_norm=False,
        bins=40,
        binrange=(frame["distance"].min(), frame["distance"].max()),
        element="step",
        ax=ax,
    )
    for pair, mean in means.items():
        ax.axvline(mean, color=colours[pair], linestyle="--")
    summary = ", ".join(f"mean {p} {m:.3f}" for p, m in means.items())
    ax.set_title(f"{title}\n{summary}")


def distance_frame(dist: np.ndarray, same: np.ndarray) -> pd.DataFrame:
    """The table pair_distance_figure draws: distance, pair (similar or dissimilar)."""
    return pd.DataFrame(
        {
            "distance": np.asarray(dist, dtype=np.float64),
            "pair": np.where(np.asarray(same, dtype=bool), "similar", "dissimilar"),
        }
    )


def pair_distance_figure(panels: Mapping[str, pd.DataFrame], per_row: int = 2) -> bytes:
    """A panel of pair-distance histograms per titled distance_frame (the Tiny ImageNet
    pair-verification report Fig. 1, 2, 12)."""
    if not panels:
        raise ValueError("no pair distances to draw")
    for frame in panels.values():
        _require(frame, ["distance", "pair"])
    with figure_style():
        fig, axes = subplots(len(panels), per_row=per_row)
        for ax, (title, frame) in zip(axes, panels.items(), strict=True):
            _distance_panel(ax, frame, title)
        return png_bytes(fig)


def _pr_panel(ax: Axes, curves: Mapping[str, pd.DataFrame], title: str) -> None:
    for name, curve in curves.items():
        _require(curve, ["precision", "recall"])
        ax.plot(curve["recall"], curve["precision"], label=name)
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="recall", ylabel="precision", title=title)
    if curves:
        ax.legend(fontsize=7)


def pr_curve_panels(panels: Mapping[str, Mapping[str, pd.DataFrame]]) -> bytes:
    """Precision against recall, a panel per title (e.g. seen and unseen) and a line per named
    curve (e.g. a loss), as in Fig. 11b of the Tiny ImageNet pair-verification report."""
    with figure_style():
        fig, axes = subplots(max(len(panels), 1))
        for ax, (title, curves) in zip(axes, panels.items(), strict=False):
            _pr_panel(ax, curves, title)
        return png_bytes(fig)
