"""The papers' figures as pure functions: arrays and tables in, PNG bytes out.

The caller reads the run folders; nothing here touches the disk. Every figure is drawn with
the Agg backend at a fixed dpi and saved without the software tag, so the same input gives
the same bytes.
"""

from __future__ import annotations

import io
import re
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
from sklearn.manifold import TSNE  # noqa: E402

DPI = 100
PANEL = (4.2, 3.6)  # inches per panel
SAME_CLASS_COLOUR = "tab:cyan"  # seed 003 Fig. 2: closer to the same class
OTHER_CLASS_COLOUR = "tab:orange"
TRAIN_COLOUR = "tab:red"  # seed 003 Fig. 1a: training red, test blue
TEST_COLOUR = "tab:blue"
SIMILAR_COLOUR = "tab:blue"  # seed 004 Fig. 12: similar pairs blue
DISSIMILAR_COLOUR = "tab:orange"

PERPLEXITY = 30.0
EARLY_EXAGGERATION = 12.0
EXAGGERATION_ITERATIONS = 250
INIT_STD = 1e-4
# Rauber et al.'s lambda, with their normalisation: the penalty is lambda / (2n) times the
# summed squared displacements, so it weighs like one KL term whatever n is. Their example
# uses 0.1 for a slowly drifting sequence; seed 003 asks for "a very small weight" so each
# layout stays its own t-SNE and only its free choices (rotation, reflection, where each
# cluster goes) are aligned. On clustered test data (n = 300 and 1000), 0.001 cut the
# misalignment of two related embeddings 2.5-3.5 fold for at most 5% more KL, and cost 8-16%
# more KL where the two embeddings disagree entirely; 0.003-0.01 cost 30-60% there.
YOKE_ALIGNMENT = 0.001
YOKE_ITERATIONS = 1000
MAX_EXACT_POINTS = 5000  # exact t-SNE keeps several (sets, n, n) float64 arrays
SIMILARITY_BLOCK = 2048

# ---------------------------------------------------------------- drawing helpers


@contextmanager
def _style() -> Iterator[None]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.8):
        yield


def _subplots(panels: int, sharey: bool = False, per_row: int = 4) -> tuple[Figure, np.ndarray]:
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


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


def _label(metric: str) -> str:
    recall = re.fullmatch(r"recall@(\d+)", metric)
    if recall:
        return f"R@{recall[1]}"
    return {"nmi": "NMI", "map@r": "MAP@R"}.get(metric, metric)


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


def _lines(
    ax: Axes, df: pd.DataFrame, x: str, y: str, hue: str | None, order: list | None = None
) -> None:
    if hue and order is None:
        order = sorted(df[hue].unique())
    sns.lineplot(data=df, x=x, y=y, hue=hue, hue_order=order, marker="o", errorbar="sd", ax=ax)
    if ax.get_legend() is not None:
        ax.legend(fontsize=7, title=hue, title_fontsize=7)


# ---------------------------------------------------------------- result curves


def recall_at_k_curves(df: pd.DataFrame) -> bytes:
    """Recall@K against K, a panel per method and a line per embedding size (seed 000 Fig. 2c/d).

    Columns: method, dims and recall@K for any K; rows are runs, lines are mean and sd over
    the runs (seeds) of a method and size.
    """
    recalls = sorted(
        (c for c in df.columns if re.fullmatch(r"recall@\d+", c)), key=lambda c: int(c[7:])
    )
    if not recalls:
        raise ValueError("the table lacks recall@K columns")
    _require(df, ["method", "dims"])
    long = df.melt(id_vars=["method", "dims"], value_vars=recalls, var_name="K", value_name="R")
    long["K"] = long["K"].str[7:].astype(int)
    sizes = sorted(long["dims"].astype(int).unique())
    long["dims"] = long["dims"].astype(int).astype(str)
    palette = dict(zip(map(str, sizes), sns.color_palette("viridis", len(sizes)), strict=True))
    methods = sorted(long["method"].unique())
    with _style():
        fig, axes = _subplots(len(methods), sharey=True)
        for ax, method in zip(axes, methods, strict=True):
            part = long[long["method"] == method]
            order = [str(s) for s in sizes if str(s) in set(part["dims"])]
            sns.lineplot(
                data=part,
                x="K",
                y="R",
                hue="dims",
                hue_order=order,
                palette=palette,
                marker="o",
                errorbar="sd",
                ax=ax,
            )
            _log2_axis(ax, long["K"].unique())
            ax.set(title=method, ylabel="Recall@K")
            ax.legend(fontsize=7, title="dims", title_fontsize=7)
        return _png(fig)


def mprec_curves(df: pd.DataFrame) -> bytes:
    """mprec@K against K (seed 002), a panel per embedding size and a line per method.

    Columns: method, dims, K, mprec; rows are (run, K), lines are mean and sd over the runs."""
    _require(df, ["method", "dims", "K", "mprec"])
    sizes = sorted(df["dims"].unique())
    with _style():
        fig, axes = _subplots(len(sizes), sharey=True)
        for ax, size in zip(axes, sizes, strict=True):
            _lines(
                ax, df[df["dims"] == size], "K", "mprec", "method", sorted(df["method"].unique())
            )
            ax.set(title=f"d = {size}", ylabel="mprec@K")
        return _png(fig)


RAW_INPUTS = "untrained (raw inputs)"


def metrics_vs_dims(
    df: pd.DataFrame,
    metrics: Sequence[str],
    baselines: Mapping[str, float] | None = None,
    panel: str | None = None,
) -> bytes:
    """A panel per metric against embedding size, a line per method (mean and sd over the
    rows of a method and size), one legend for all; a dashed line at each given baseline.
    With `panel`, a row of such panels per value of that column (e.g. a backbone and
    validation split), so that the lines of one panel stay few enough to read."""
    _require(df, ["method", "dims", *metrics, *([panel] if panel else [])])
    order = sorted(df["method"].unique())
    groups = list(df.groupby(panel, sort=True)) if panel else [("", df)]
    with _style():
        fig, axes = _subplots(len(metrics) * len(groups), per_row=len(metrics))
        for i, (value, part) in enumerate(groups):
            row = axes[i * len(metrics) : (i + 1) * len(metrics)]
            for ax, metric in zip(row, metrics, strict=True):
                _lines(ax, part, "dims", metric, "method", order)
                baseline = (baselines or {}).get(metric)
                if baseline is not None and not pd.isna(baseline):
                    ax.axhline(baseline, color="gray", linestyle="--", label=RAW_INPUTS)
                _log2_axis(ax, df["dims"].unique())
                title = f"{_label(metric)} against embedding size"
                ax.set(ylabel=_label(metric), title=f"{title}\n{value}" if value else title)
                if ax.get_legend() is not None:
                    ax.get_legend().remove()
        legend = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
        fig.legend(legend.values(), legend.keys(), loc="outside right upper", fontsize=7)
        return _png(fig)


def accuracy_vs_examples(df: pd.DataFrame) -> bytes:
    """Test accuracy against training examples per class, a line per method (seed 000 Fig. 3)."""
    _require(df, ["method", "train_per_class", "accuracy"])
    with _style():
        fig, (ax,) = _subplots(1)
        _lines(ax, df, "train_per_class", "accuracy", "method")
        ax.set_xticks(sorted(df["train_per_class"].unique()))
        ax.set(xlabel="training examples per class", title="accuracy against examples per class")
        return _png(fig)


def neighbours_effect(df: pd.DataFrame, metric: str) -> bytes:
    """A metric against the number of neighbours k used in training (seed 000 Fig. 4a).

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
    with _style():
        fig, (ax,) = _subplots(1)
        _lines(ax, df, "k", metric, hue, order)
        _log2_axis(ax, df["k"].unique())
        ax.set(xlabel="neighbours k", ylabel=_label(metric))
        ax.set_title(f"{_label(metric)} against neighbours k")
        return _png(fig)


def centre_statistics(history: pd.DataFrame, hue: str | None = None) -> bytes:
    """Mean distance and kernel value to the nearest centres per epoch (seed 000 Fig. 4b, 4c).

    One run's history, or several stacked with a `hue` column naming each line (mean and sd
    over the rows of a hue value and epoch, e.g. over seeds).
    """
    panels = {
        "mean_centre_distance": "mean distance to nearest centres",
        "mean_kernel_value": "mean kernel value to nearest centres",
    }
    _require(history, ["epoch", *panels, *([hue] if hue else [])])
    with _style():
        fig, axes = _subplots(2)
        for ax, (column, title) in zip(axes, panels.items(), strict=True):
            part = history.dropna(subset=[column])
            _lines(ax, part, "epoch", column, hue)
            _integer_axis(ax, history["epoch"].unique())
            ax.set(xlabel="epoch", ylabel=column.replace("_", " "), title=title)
        return _png(fig)


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
    """A panel of pair-distance histograms per titled distance_frame (seed 004 Fig. 1, 2, 12)."""
    if not panels:
        raise ValueError("no pair distances to draw")
    for frame in panels.values():
        _require(frame, ["distance", "pair"])
    with _style():
        fig, axes = _subplots(len(panels), per_row=per_row)
        for ax, (title, frame) in zip(axes, panels.items(), strict=True):
            _distance_panel(ax, frame, title)
        return _png(fig)


def _pr_panel(ax: Axes, curves: Mapping[str, pd.DataFrame], title: str) -> None:
    for name, curve in curves.items():
        _require(curve, ["precision", "recall"])
        ax.plot(curve["recall"], curve["precision"], label=name)
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="recall", ylabel="precision", title=title)
    if curves:
        ax.legend(fontsize=7)


def pr_curves(curves: Mapping[str, pd.DataFrame]) -> bytes:
    """Precision against recall, a line per named curve, e.g. seen, unseen (seed 004 Fig. 11b)."""
    return pr_curve_panels({"precision-recall": curves})


def pr_curve_panels(panels: Mapping[str, Mapping[str, pd.DataFrame]]) -> bytes:
    """A pr_curves panel per title, e.g. seen and unseen, a line per loss (seed 004 Fig. 11b)."""
    with _style():
        fig, axes = _subplots(max(len(panels), 1))
        for ax, (title, curves) in zip(axes, panels.items(), strict=False):
            _pr_panel(ax, curves, title)
        return _png(fig)


# ---------------------------------------------------------------- t-SNE


def clip_perplexity(perplexity: float, n: int) -> float:
    """The perplexity, kept below n / 3 (and at least 1) so tiny inputs still embed."""
    return float(min(perplexity, max((n - 1) / 3, 1.0)))


def tsne_2d(x: np.ndarray, seed: int = 0, perplexity: float = PERPLEXITY) -> np.ndarray:
    """scikit-learn's t-SNE to 2-D with PCA initialisation and a fixed random state: (n, 2)."""
    x = np.asarray(x, dtype=np.float64)
    tsne = TSNE(
        n_components=2,
        perplexity=clip_perplexity(perplexity, len(x)),
        init="pca",
        learning_rate="auto",
        random_state=seed,
    )
    return tsne.fit_transform(x)


def squared_distances(x: np.ndarray) -> np.ndarray:
    sq = np.einsum("ij,ij->i", x, x)
    return np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)


def conditional_probabilities(
    x: np.ndarray, perplexity: float, tol: float = 1e-10, max_iter: int = 200
) -> np.ndarray:
    """Row-stochastic p(j|i): Gaussian affinities whose precision is bisected per row until the
    row's perplexity exp(entropy) is the requested one (van der Maaten & Hinton 2008)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2 or not 0 < perplexity <= n - 1:
        raise ValueError(f"perplexity {perplexity} needs 0 < perplexity <= n - 1 = {n - 1}")
    d = squared_distances(x)
    diagonal = np.arange(n)
    d[diagonal, diagonal] = np.inf
    # Shifting a row by its smallest distance leaves p(j|i) unchanged and keeps exp() from
    # underflowing for far-apart points.
    d -= d.min(axis=1, keepdims=True)
    d[diagonal, diagonal] = 0.0
    target = np.log(perplexity)
    beta = np.ones(n)
    lo, hi = np.zeros(n), np.full(n, np.inf)
    for _ in range(max_iter):
        p = np.exp(-d * beta[:, None])
        p[diagonal, diagonal] = 0.0
        total = p.sum(axis=1)
        error = np.log(total) + beta * (d * p).sum(axis=1) / total - target
        active = np.abs(error) >= tol
        if not active.any():
            break
        sharpen = active & (error > 0)  # entropy too high: raise the precision
        soften = active & (error < 0)
        lo = np.where(sharpen, beta, lo)
        hi = np.where(soften, beta, hi)
        beta = np.where(active, np.where(np.isinf(hi), beta * 2, (lo + hi) / 2), beta)
    return p / total[:, None]


def joint_probabilities(x: np.ndarray, perplexity: float) -> np.ndarray:
    """Symmetric P of t-SNE, (p(j|i) + p(i|j)) / 2n: sums to one, zero diagonal."""
    cond = conditional_probabilities(x, perplexity)
    return (cond + cond.T) / (2 * len(cond))


def _kl_gradients(p: np.ndarray, y: np.ndarray, num: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Gradient of KL(P || Q) for each stacked layout: p (sets, n, n), y (sets, n, 2).

    num and w are (sets, n, n) scratch arrays, reused across iterations because allocating
    them afresh costs more than the arithmetic.
    """
    np.subtract(y[:, :, None, 0], y[:, None, :, 0], out=num)
    np.square(num, out=num)
    np.subtract(y[:, :, None, 1], y[:, None, :, 1], out=w)
    np.square(w, out=w)
    num += w
    num += 1.0
    np.reciprocal(num, out=num)  # the Student-t kernel 1 / (1 + d^2)
    diagonal = np.arange(y.shape[1])
    num[:, diagonal, diagonal] = 0.0
    np.divide(num, num.sum(axis=(1, 2), keepdims=True), out=w)  # Q
    np.subtract(p, w, out=w)
    w *= num
    # One product gives both sum_j w_ij y_j and sum_j w_ij.
    sums = w @ np.concatenate([y, np.ones_like(y[..., :1])], axis=2)
    return 4.0 * (sums[..., 2:] * y - sums[..., :2])


def _aligned(y: np.ndarray, step: np.ndarray, alignment: float) -> np.ndarray:
    """Backward-Euler step on alignment / (2n) * sum_t ||y[t] - y[t+1]||^2 (Rauber et al. 2016).

    Solves (I + c L) y_new = y per point and coordinate, with L the path Laplacian over the
    layouts and c = alignment / n times that coordinate's step (rate times gains). An explicit
    gradient step on this term diverges once rate * alignment / n nears 1; this one is stable
    for any weight and has the same fixed points.
    """
    sets, n = y.shape[:2]
    if sets == 1 or alignment == 0:
        return y
    c = step * (alignment / n)
    # The system is tridiagonal: Thomas elimination down the layouts, then back-substitution.
    degree = np.full(sets, 2.0)
    degree[[0, -1]] = 1.0
    diag = 1.0 + c * degree[:, None, None]
    upper = np.zeros_like(c)
    rhs = np.array(y)
    upper[0] = -c[0] / diag[0]
    rhs[0] /= diag[0]
    for t in range(1, sets):
        pivot = diag[t] + c[t] * upper[t - 1]
        upper[t] = -c[t] / pivot
        rhs[t] = (rhs[t] + c[t] * rhs[t - 1]) / pivot
    for t in range(sets - 2, -1, -1):
        rhs[t] -= upper[t] * rhs[t + 1]
    return rhs


def yoked_tsne(
    embeddings: Sequence[np.ndarray],
    alignment: float = YOKE_ALIGNMENT,
    seed: int = 0,
    iterations: int = YOKE_ITERATIONS,
    perplexity: float = PERPLEXITY,
) -> list[np.ndarray]:
    """Dynamic t-SNE (Rauber et al. 2016): one 2-D layout per embedding of the same n points.

    Minimises sum_t KL(P_t || Q_t) + alignment / (2n) * sum_t sum_i |y_i[t] - y_i[t+1]|^2 over
    all layouts at once, from one shared random start, with exact gradients and the usual
    t-SNE schedule (early exaggeration 12 with momentum 0.5 for 250 iterations, then
    momentum 0.8; per-coordinate gains; learning rate max(n / 48, 50)). alignment = 0 gives
    independent t-SNEs; a large one forces the layouts together.
    """
    xs = [np.asarray(e, dtype=np.float64) for e in embeddings]
    n = len(xs[0]) if xs else 0
    if not xs or any(len(x) != n for x in xs):
        raise ValueError("yoked t-SNE needs one or more embeddings of the same points")
    if n > MAX_EXACT_POINTS:
        raise ValueError(f"exact t-SNE of {n} points: subsample to {MAX_EXACT_POINTS} or fewer")
    p = np.stack([joint_probabilities(x, clip_perplexity(perplexity, n)) for x in xs])
    p_early = p * EARLY_EXAGGERATION
    num, w = np.empty_like(p), np.empty_like(p)
    start = np.random.default_rng(seed).normal(0.0, INIT_STD, size=(n, 2))
    y = np.repeat(start[None], len(xs), axis=0)
    rate = max(n / EARLY_EXAGGERATION / 4, 50.0)
    for it in range(iterations):
        if it in (0, EXAGGERATION_ITERATIONS):  # each phase starts afresh, as in scikit-learn
            update, gains = np.zeros_like(y), np.ones_like(y)
        early = it < EXAGGERATION_ITERATIONS
        grad = _kl_gradients(p_early if early else p, y, num, w)
        gains = np.where(update * grad < 0, gains + 0.2, gains * 0.8).clip(min=0.01)
        moved = y + (0.5 if early else 0.8) * update - rate * gains * grad
        moved = _aligned(moved, rate * gains, alignment)
        update, y = moved - y, moved
    return list(y)


def _class_colours(*labels: np.ndarray) -> dict:
    classes = np.unique(np.concatenate([np.asarray(lab) for lab in labels]))
    return dict(zip(classes.tolist(), sns.color_palette("husl", len(classes)), strict=True))


def _by_class(colours: dict, labels: np.ndarray) -> list:
    return [colours[c] for c in np.asarray(labels).tolist()]


def _limits(*layouts: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    points = np.concatenate(layouts)
    lo, hi = points.min(axis=0), points.max(axis=0)
    pad = 0.05 * np.maximum(hi - lo, 1e-9)
    return (lo[0] - pad[0], hi[0] + pad[0]), (lo[1] - pad[1], hi[1] + pad[1])


def _points(ax: Axes, xy: np.ndarray, colours, title: str, limits, alpha: float = 1.0) -> None:
    ax.scatter(xy[:, 0], xy[:, 1], c=colours, s=6, linewidths=0, alpha=alpha)
    ax.set(xlim=limits[0], ylim=limits[1], xticks=[], yticks=[], title=title)


def joint_tsne_figure(
    layout: np.ndarray, train_labels: np.ndarray, test_labels: np.ndarray
) -> bytes:
    """Three panels of one joint layout whose first rows are the training points: training by
    class, test by class, and both by split (training red, test blue) (seed 003 Fig. 1a)."""
    layout = np.asarray(layout)
    n_train = len(train_labels)
    if len(layout) != n_train + len(test_labels):
        raise ValueError("the layout needs one row per training and test point")
    train, test = layout[:n_train], layout[n_train:]
    colours = _class_colours(train_labels, test_labels)
    limits = _limits(layout)
    with _style():
        fig, axes = _subplots(3)
        by_class = _by_class(colours, train_labels)
        _points(axes[0], train, by_class, f"training by class ({n_train})", limits)
        by_class = _by_class(colours, test_labels)
        _points(axes[1], test, by_class, f"test by class ({len(test)})", limits)
        _points(axes[2], train, TRAIN_COLOUR, "", limits, alpha=0.5)
        _points(axes[2], test, TEST_COLOUR, "training (red) and test (blue)", limits, alpha=0.5)
        return _png(fig)


def joint_tsne(
    train: np.ndarray,
    train_labels: np.ndarray,
    test: np.ndarray,
    test_labels: np.ndarray,
    seed: int = 0,
    perplexity: float = PERPLEXITY,
) -> bytes:
    """One t-SNE of the training and test embeddings together, drawn by joint_tsne_figure."""
    layout = tsne_2d(np.concatenate([train, test]), seed=seed, perplexity=perplexity)
    return joint_tsne_figure(layout, train_labels, test_labels)


def yoked_tsne_figure(
    layouts: Sequence[np.ndarray], labels: np.ndarray, titles: Sequence[str]
) -> bytes:
    """The yoked layouts side by side on the same axes limits, points coloured by class."""
    if len(layouts) != len(titles) or not layouts:
        raise ValueError("one title per layout, and at least one layout")
    point_colours = _by_class(_class_colours(labels), labels)
    limits = _limits(*layouts)
    with _style():
        fig, axes = _subplots(len(layouts))
        for ax, layout, title in zip(axes, layouts, titles, strict=True):
            _points(ax, np.asarray(layout), point_colours, title, limits)
        return _png(fig)


# ---------------------------------------------------------------- same vs different similarity


def similarity_scatter(embeddings: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """Per point, the cosine similarity to its most similar other point of its class (same) and
    of another class (different); correct when same > different, i.e. when its nearest
    neighbour would classify it rightly (seed 003 Sec. 2.4).

    A missing side is NaN: a class's only member has no same value and is never correct; with a
    single class there is no different value and every point that has a same value is correct.
    Ties count as wrong.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(float).tiny)
    labels = np.asarray(labels)
    same = np.full(len(x), -np.inf)
    different = np.full(len(x), -np.inf)
    for start in range(0, len(x), SIMILARITY_BLOCK):
        rows = np.arange(start, min(start + SIMILARITY_BLOCK, len(x)))
        sim = x[rows] @ x.T
        sim[np.arange(len(rows)), rows] = -np.inf  # the point itself
        is_same = labels[rows, None] == labels[None, :]
        same[rows] = np.where(is_same, sim, -np.inf).max(axis=1, initial=-np.inf)
        different[rows] = np.where(is_same, -np.inf, sim).max(axis=1, initial=-np.inf)
    correct = same > different
    return pd.DataFrame(
        {
            "same": np.where(np.isinf(same), np.nan, same),
            "different": np.where(np.isinf(different), np.nan, different),
            "correct": correct,
        }
    )


def similarity_scatter_figure(train_df: pd.DataFrame, test_df: pd.DataFrame) -> bytes:
    """Training and test panels of different- against same-class similarity (seed 003 Fig. 2):
    points below the diagonal (cyan) are closer to their own class."""
    values = pd.concat([train_df, test_df])[["same", "different"]].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    lo, hi = (values.min(), values.max()) if len(values) else (-1.0, 1.0)
    pad = 0.05 * max(hi - lo, 1e-3)
    lims = (lo - pad, hi + pad)
    with _style():
        fig, axes = _subplots(2)
        for ax, df, split in zip(axes, (train_df, test_df), ("training", "test"), strict=True):
            colours = np.where(df["correct"].to_numpy(bool), SAME_CLASS_COLOUR, OTHER_CLASS_COLOUR)
            ax.scatter(df["same"], df["different"], c=colours, s=6, linewidths=0)
            ax.plot(lims, lims, color="black", linewidth=0.8)
            share = df["correct"].mean() if len(df) else float("nan")
            ax.set(xlim=lims, ylim=lims, aspect="equal")
            ax.set(xlabel="similarity to closest same class", ylabel="to closest other class")
            ax.set_title(f"{split}: {100 * share:.1f}% closest to the same class")
        return _png(fig)
