"""t-SNE of embeddings: sklearn's for one set; for several, an exact t-SNE whose layouts are yoked
(Liu et al. 2019), with their figures (PNG bytes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from sklearn.manifold import TSNE

from bench.report.figures import TEST_COLOUR, TRAIN_COLOUR, figure_style, png_bytes, subplots

PERPLEXITY = 30.0
EARLY_EXAGGERATION = 12.0
EXAGGERATION_ITERATIONS = 250
INIT_STD = 1e-4
# Rauber et al.'s lambda, with their normalisation: the penalty is lambda / (2n) times the
# summed squared displacements, so it weighs like one KL term whatever n is. Their example
# uses 0.1 for a slowly drifting sequence; Liu et al. 2019 asks for "a very small weight" so each
# layout stays its own t-SNE and only its free choices (rotation, reflection, where each
# cluster goes) are aligned. On clustered test data (n = 300 and 1000), 0.001 cut the
# misalignment of two related embeddings 2.5-3.5 fold for at most 5% more KL, and cost 8-16%
# more KL where the two embeddings disagree entirely; 0.003-0.01 cost 30-60% there.
YOKE_ALIGNMENT = 0.001
YOKE_ITERATIONS = 1000
MAX_EXACT_POINTS = 5000  # exact t-SNE keeps several (sets, n, n) arrays
PAIR_DTYPE = np.float32


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

    num and w are (sets, n, n) scratch arrays of p's dtype, reused across iterations because
    allocating them afresh costs more than the arithmetic.
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
    sums = w @ np.concatenate([y, np.ones_like(y[..., :1])], axis=2).astype(w.dtype)
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
    # The (sets, n, n) arrays in float32 (the layouts stay float64): half the memory traffic of
    # each iteration; at 10 sets of 500 points 8.4 s against 16.4 s, the summed KL within 1 %.
    p = p.astype(PAIR_DTYPE)
    p_early = p * PAIR_DTYPE(EARLY_EXAGGERATION)
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


NAMED_CLASSES = 10  # classes a t-SNE colours and names; the others are grey
OTHER_CLASSES = (0.8, 0.8, 0.8)


def _class_colours(*labels: np.ndarray) -> dict:
    """A colour per class: the NAMED_CLASSES classes with the most points (the smaller label
    first among equals) in tab10's colours, which a legend names; any others grey, since a
    hundred hues cannot be told apart."""
    classes, counts = np.unique(
        np.concatenate([np.asarray(lab) for lab in labels]), return_counts=True
    )
    named = classes[np.argsort(-counts, kind="stable")[:NAMED_CLASSES]]
    colours = dict(zip(sorted(named.tolist()), sns.color_palette("tab10", len(named)), strict=True))
    return {c: colours.get(c, OTHER_CLASSES) for c in classes.tolist()}


def _class_legend(fig, colours: dict) -> None:
    """A legend under the panels naming the coloured classes, and the grey ones' count."""
    named = [c for c, colour in colours.items() if colour != OTHER_CLASSES]
    handles = [Line2D([], [], marker="o", linestyle="", color=colours[c]) for c in named]
    texts = [f"class {c}" for c in named]
    others = len(colours) - len(named)
    if others:
        handles.append(Line2D([], [], marker="o", linestyle="", color=OTHER_CLASSES))
        texts.append(f"{others} other classes")
    fig.legend(handles, texts, loc="outside lower center", ncols=min(len(texts), 6), fontsize=7)


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
    class, test by class, and both by split (training red, test blue) (Liu et al. 2019 Fig. 1a)."""
    layout = np.asarray(layout)
    n_train = len(train_labels)
    if len(layout) != n_train + len(test_labels):
        raise ValueError("the layout needs one row per training and test point")
    train, test = layout[:n_train], layout[n_train:]
    colours = _class_colours(train_labels, test_labels)
    limits = _limits(layout)
    with figure_style():
        fig, axes = subplots(3)
        by_class = _by_class(colours, train_labels)
        _points(axes[0], train, by_class, f"training by class ({n_train})", limits)
        by_class = _by_class(colours, test_labels)
        _points(axes[1], test, by_class, f"test by class ({len(test)})", limits)
        _points(axes[2], train, TRAIN_COLOUR, "", limits, alpha=0.5)
        _points(axes[2], test, TEST_COLOUR, "training (red) and test (blue)", limits, alpha=0.5)
        _class_legend(fig, colours)
        return png_bytes(fig)


def joint_tsne(
    train: np.ndarray,
    train_labels: np.ndarray,
    test: np.ndarray,
    test_labels: np.ndarray,
) -> bytes:
    """One t-SNE of the training and test embeddings together, drawn by joint_tsne_figure."""
    layout = tsne_2d(np.concatenate([train, test]))
    return joint_tsne_figure(layout, train_labels, test_labels)


def yoked_tsne_figure(
    layouts: Sequence[np.ndarray], labels: np.ndarray, titles: Sequence[str]
) -> bytes:
    """The yoked layouts side by side on the same axes limits, points coloured by class."""
    if len(layouts) != len(titles) or not layouts:
        raise ValueError("one title per layout, and at least one layout")
    colours = _class_colours(labels)
    point_colours = _by_class(colours, labels)
    limits = _limits(*layouts)
    with figure_style():
        fig, axes = subplots(len(layouts))
        for ax, layout, title in zip(axes, layouts, titles, strict=True):
            _points(ax, np.asarray(layout), point_colours, title, limits)
        _class_legend(fig, colours)
        return png_bytes(fig)
