import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import precision_recall_curve

from bench.report import colours, figures, similarity, tsne
from bench.util.knn import knn

PNG = b"\x89PNG"


def clusters(seed: int, per_class: int = 30, classes: int = 3, dims: int = 10):
    """Well-separated Gaussian clusters; the seed picks the centres and the noise."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    centres = rng.normal(0.0, 10.0, (classes, dims))
    return centres[labels] + rng.normal(0.0, 1.0, (len(labels), dims)), labels


def runs() -> pd.DataFrame:
    rows = []
    for method in ("nngk", "triplet"):
        for dims in (64, 128, 512):
            for seed in (0, 1):
                base = 0.5 + dims / 2000 + seed / 50 + (method == "nngk") / 10
                rows.append(
                    {
                        "method": method,
                        "dims": dims,
                        "seed": seed,
                        **{f"recall@{k}": min(base + k / 40, 1.0) for k in (1, 2, 4, 8)},
                        "nmi": base / 2,
                    }
                )
    return pd.DataFrame(rows)


def pr_curve(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    same = rng.random(200) < 0.5
    precision, recall, _ = precision_recall_curve(same, same + rng.normal(0, 0.8, 200))
    return pd.DataFrame({"precision": precision, "recall": recall})


def yoked_figure() -> bytes:
    a, labels = clusters(0, per_class=20)
    b, _ = clusters(1, per_class=20)
    layouts = tsne.yoked_tsne([a, b], iterations=300)
    return tsne.yoked_tsne_figure(layouts, labels, ["loss A", "loss B"])


def similarity_figure() -> bytes:
    train, train_labels = clusters(0)
    test, test_labels = clusters(1, per_class=1, classes=40)
    return similarity.similarity_scatter_figure(
        similarity.similarity_scatter(train, train_labels),
        similarity.similarity_scatter(test, test_labels % 7),
    )


def joint_figure() -> bytes:
    train, train_labels = clusters(0, per_class=20)
    test, test_labels = clusters(1, per_class=15)
    return tsne.joint_tsne(train, train_labels, test, test_labels + 3)


FIGURES = {
    "recall_at_k_curves": lambda: figures.recall_at_k_curves(runs()),
    "metric_vs_dims": lambda: figures.metrics_vs_dims(runs(), ["nmi"]),
    "accuracy_vs_examples": lambda: figures.accuracy_vs_examples(
        pd.DataFrame(
            {
                "method": ["nngk"] * 3 + ["softmax"] * 3,
                "train_per_class": [5, 10, 20] * 2,
                "accuracy": [0.3, 0.5, 0.6, 0.2, 0.4, 0.55],
            }
        )
    ),
    "neighbours_effect": lambda: figures.neighbours_effect(
        pd.DataFrame({"k": [1, 5, 50, 200] * 2, "map@r": np.linspace(0.1, 0.5, 8)}),
        "map@r",
    ),
    "neighbours_effect_hue": lambda: figures.neighbours_effect(
        runs().assign(k=lambda d: 2 ** (d["seed"] + 3)), "recall@1"
    ),
    "centre_statistics": lambda: figures.centre_statistics(
        pd.DataFrame(
            {
                "epoch": [0, 1, 2, 3],
                "mean_centre_distance": [1.5, 1.1, 0.9, 0.8],
                "mean_kernel_value": [0.1, 0.3, np.nan, 0.5],
            }
        )
    ),
    "pair_distance_figure_one_panel": lambda: figures.pair_distance_figure(
        {
            "seen categories": figures.distance_frame(
                np.concatenate([np.linspace(0, 0.6, 50), np.linspace(0.3, 1.2, 70)]),
                np.arange(120) < 50,
            )
        }
    ),
    "pr_curve_panels_one": lambda: figures.pr_curve_panels(
        {"precision-recall": {"seen": pr_curve(0), "unseen": pr_curve(1)}}
    ),
    "metrics_vs_dims": lambda: figures.metrics_vs_dims(
        runs(), ["recall@1", "nmi"], {"raw inputs": {"nmi": 0.3}}
    ),
    "centre_statistics_hue": lambda: figures.centre_statistics(
        pd.DataFrame(
            {
                "epoch": [1, 2, 3] * 3,
                "mean_centre_distance": np.linspace(1.5, 0.5, 9),
                "mean_kernel_value": np.linspace(0.1, 0.6, 9),
                "run": ["nngk, d64"] * 6 + ["nngk, d512"] * 3,
            }
        ),
        hue="run",
    ),
    "pair_distance_figure": lambda: figures.pair_distance_figure(
        {
            f"loss {i}: {split}": figures.distance_frame(
                np.linspace(0, 1, 20), np.arange(20) < 8 + i
            )
            for i in range(2)
            for split in ("seen", "unseen")
        }
    ),
    "pr_curve_panels": lambda: figures.pr_curve_panels(
        {"seen": {"a": pr_curve(0), "b": pr_curve(1)}, "unseen": {"a": pr_curve(2)}}
    ),
    "similarity_scatter_figure": similarity_figure,
    "yoked_tsne_figure": yoked_figure,
    "joint_tsne": joint_figure,
}


@pytest.mark.parametrize("name", FIGURES)
def test_figures_are_png_and_deterministic(name):
    first = FIGURES[name]()
    assert first.startswith(PNG)
    assert FIGURES[name]() == first
    assert plt.get_fignums() == []  # every figure closed


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match="train_per_class"):
        figures.accuracy_vs_examples(pd.DataFrame({"method": ["a"], "accuracy": [0.5]}))


def brute_force_similarity(x: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    unit = [row / np.linalg.norm(row) for row in x]
    rows = []
    for i in range(len(x)):
        same = [unit[i] @ unit[j] for j in range(len(x)) if j != i and labels[j] == labels[i]]
        other = [unit[i] @ unit[j] for j in range(len(x)) if labels[j] != labels[i]]
        best_same = max(same) if same else np.nan
        best_other = max(other) if other else np.nan
        correct = bool(same) and (not other or best_same > best_other)
        rows.append({"same": best_same, "different": best_other, "correct": correct})
    return pd.DataFrame(rows)


def assert_same_table(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == ["same", "different", "correct"]
    np.testing.assert_allclose(got["same"], expected["same"], atol=1e-12)
    np.testing.assert_allclose(got["different"], expected["different"], atol=1e-12)
    assert got["correct"].tolist() == expected["correct"].tolist()


def test_similarity_scatter_hand_made():
    x = np.array([[1.0, 0.0], [2.0, 0.2], [0.0, 1.0], [0.1, 3.0], [1.0, 1.0]])
    labels = np.array([0, 0, 1, 1, 2])  # class 2 has one member
    got = similarity.similarity_scatter(x, labels)
    cos = 2.0 / np.sqrt(4.04)  # points 0 and 1
    assert got["same"][0] == pytest.approx(cos)  # not 1.0: the point itself is excluded
    assert got["different"][0] == pytest.approx(1 / np.sqrt(2))  # point 4
    assert got["correct"][:4].tolist() == [True, True, True, True]
    assert np.isnan(got["same"][4]) and not got["correct"][4]
    assert got["different"][4] == pytest.approx(2.2 / np.sqrt(2 * 4.04))  # point 1
    assert_same_table(got, brute_force_similarity(x, labels))


def test_similarity_scatter_ties_and_one_class():
    dup = np.array([[1.0, 0.0], [3.0, 0.0], [2.0, 0.0]])
    tied = similarity.similarity_scatter(dup, np.array([0, 0, 1]))
    assert tied["correct"][:2].tolist() == [False, False]  # same == different is not closer
    one_class = similarity.similarity_scatter(dup, np.zeros(3))
    assert one_class["different"].isna().all() and one_class["correct"].all()


def test_similarity_scatter_matches_brute_force(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(45, 6)) * rng.uniform(0.1, 10, (45, 1))  # cosine ignores the norm
    labels = rng.integers(0, 6, 45)
    monkeypatch.setattr(similarity, "SIMILARITY_BLOCK", 7)  # several blocks, a ragged last one
    assert_same_table(similarity.similarity_scatter(x, labels), brute_force_similarity(x, labels))


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("perplexity", [5.0, 20.0])
def test_perplexity_calibration(scale, perplexity):
    x, _ = clusters(4, per_class=25, classes=4)
    cond = tsne.conditional_probabilities(scale * x, perplexity)
    np.testing.assert_allclose(cond.sum(axis=1), 1.0)
    assert np.all(np.diag(cond) == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = -np.nansum(cond * np.log2(cond), axis=1)
    np.testing.assert_allclose(2**bits, perplexity, atol=1e-3)
    p = tsne.joint_probabilities(scale * x, perplexity)
    np.testing.assert_allclose(p, p.T, atol=0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_perplexity_beyond_the_points_is_refused():
    with pytest.raises(ValueError, match="perplexity"):
        tsne.conditional_probabilities(np.eye(5), 10.0)


def knn_accuracy(layout: np.ndarray, labels: np.ndarray, k: int = 5) -> float:
    _, idx = knn(layout, k)
    return float((labels[idx] == labels[:, None]).mean())


def misalignment(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm((a - a.mean(axis=0)) - (b - b.mean(axis=0)), axis=1).mean())


def test_yoked_tsne_alignment():
    a, labels = clusters(0)
    b, _ = clusters(1)  # the same points and classes, embedded differently
    free = tsne.yoked_tsne([a, b], alignment=0.0)
    default = tsne.yoked_tsne([a, b])
    yoked = tsne.yoked_tsne([a, b], alignment=10.0)
    for layout in (*free, *default, *yoked):
        assert layout.shape == (len(a), 2) and np.isfinite(layout).all()
    for layout in (*free, *default):
        assert knn_accuracy(layout, labels) > 0.9
    assert misalignment(*yoked) < 0.1 * misalignment(*free)
    assert misalignment(*free) > 1.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kl_gradients_match_scikit_learns_exact_t_sne(dtype):
    """Each stacked layout's gradient is scikit-learn's exact one for its own P (the pair
    arrays in float32, as yoked_tsne keeps them, to float32's precision)."""
    from scipy.spatial.distance import squareform
    from sklearn.manifold._t_sne import _kl_divergence

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(40, 5)) for _ in range(3)]
    p = np.stack([tsne.joint_probabilities(x, 10.0) for x in xs])
    y = rng.normal(size=(3, 40, 2))
    pairs = p.astype(dtype)
    got = tsne._kl_gradients(pairs, y, np.empty_like(pairs), np.empty_like(pairs))
    for p_t, y_t, g in zip(p, y, got, strict=True):
        _, want = _kl_divergence(y_t.ravel(), squareform(p_t, checks=False), 1, 40, 2)
        rtol = 1e-10 if dtype == np.float64 else 1e-4
        np.testing.assert_allclose(g.ravel(), want, rtol=rtol, atol=rtol * np.abs(want).max())


def test_yoked_tsne_is_deterministic_and_takes_several_layouts():
    embeddings = [clusters(seed, per_class=15)[0] for seed in range(3)]
    first = tsne.yoked_tsne(embeddings, iterations=200, seed=5)
    second = tsne.yoked_tsne(embeddings, iterations=200, seed=5)
    assert len(first) == 3
    for a, b in zip(first, second, strict=True):
        assert a.shape == (45, 2) and np.isfinite(a).all()
        np.testing.assert_array_equal(a, b)


def test_yoked_tsne_needs_the_same_points():
    with pytest.raises(ValueError, match="same points"):
        tsne.yoked_tsne([np.zeros((10, 3)), np.zeros((11, 3))])


@pytest.mark.parametrize("sets", [2, 3, 5])
def test_alignment_step_solves_the_implicit_system(sets):
    rng = np.random.default_rng(sets)
    y = rng.normal(size=(sets, 7, 2))
    step = rng.uniform(0.1, 100.0, size=(sets, 7, 2))
    got = tsne._aligned(y, step, alignment=3.0)
    path = np.diff(np.eye(sets), axis=0)
    laplacian = path.T @ path
    for i in range(7):
        for c in range(2):
            system = np.eye(sets) + np.diag(step[:, i, c] * 3.0 / 7) @ laplacian
            np.testing.assert_allclose(got[:, i, c], np.linalg.solve(system, y[:, i, c]))


def test_tsne_2d_clips_the_perplexity_for_tiny_inputs():
    assert tsne.clip_perplexity(30, 10) == 3.0
    assert tsne.clip_perplexity(30, 1000) == 30.0
    layout = tsne.tsne_2d(np.random.default_rng(0).normal(size=(6, 4)))
    assert layout.shape == (6, 2) and np.isfinite(layout).all()


def test_joint_tsne_figure_needs_a_row_per_point():
    with pytest.raises(ValueError, match="one row per"):
        tsne.joint_tsne_figure(np.zeros((5, 2)), np.zeros(3), np.zeros(3))


def test_metrics_vs_dims_draws_a_row_of_panels_per_variant(monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "png_bytes", lambda fig: drawn.append(fig) or PNG)
    one = runs()
    two = pd.concat([one.assign(variant="BatchNorm"), one.assign(variant="GroupNorm")])
    figures.metrics_vs_dims(one, ["recall@1", "nmi"], {"raw inputs": {"nmi": 0.3}})
    figures.metrics_vs_dims(two, ["recall@1", "nmi"], {"raw inputs": {"nmi": 0.3}}, panel="variant")
    flat, rows = ([ax for ax in fig.axes if ax.get_visible()] for fig in drawn)
    assert len(flat) == 2 and len(rows) == 4
    assert [ax.get_title().splitlines()[-1] for ax in rows] == ["BatchNorm"] * 2 + ["GroupNorm"] * 2
    # One legend for the figure: each method once, and the raw inputs once.
    (legend,) = drawn[1].legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["nngk", "triplet", "raw inputs"]
    for fig in drawn:
        plt.close(fig)


def test_mean_sd_lines_draws_each_hues_mean_and_one_sd_as_a_plain_loop_computes_them():
    rows = [("a", 1, 0.1), ("a", 1, 0.3), ("a", 2, 0.5), ("a", 2, 0.9), ("a", 2, 0.4),
            ("b", 1, 0.7), ("b", 4, 0.2), ("b", 4, np.nan)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["method", "dims", "score"])
    fig, ax = plt.subplots()
    figures.mean_sd_lines(ax, df, "dims", "score", "method", ["b", "a"])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["b", "a"]
    for line, band, method in zip(ax.lines, ax.collections, ["b", "a"], strict=True):
        xs = sorted({x for m, x, y in rows if m == method})
        values = [[y for m, x2, y in rows if m == method and x2 == x and y == y] for x in xs]
        means = [sum(v) / len(v) for v in values]
        sds = [np.std(v, ddof=1) if len(v) > 1 else np.nan for v in values]
        np.testing.assert_allclose(line.get_xdata(), xs)
        np.testing.assert_allclose(line.get_ydata(), means)
        edge = band.get_paths()[0].vertices[:, 1] if band.get_paths() else np.array([])
        for mean, sd in zip(means, sds, strict=True):
            if not np.isnan(sd):
                assert np.isclose(edge, mean + sd).any() and np.isclose(edge, mean - sd).any()
    plt.close(fig)


def test_more_than_ten_lines_get_distinct_colours():
    # seaborn's default palette repeats after ten: an eleventh loss would share a colour.
    assert len(set(figures.line_colours(10))) == 10
    assert len(set(figures.line_colours(14))) == 14
    with plt.style.context("ggplot"):  # a style whose cycle has 7 colours (Optuna's plots use it)
        assert len(set(figures.line_colours(10))) == 10


def test_tunings_optuna_plots_leave_the_matplotlib_style_as_it_was(tmp_path):
    import optuna

    from bench.tune.study import save_plots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_float("lr", 0.0, 1.0) + t.suggest_float("m", 0, 1), 4)
    before = dict(plt.rcParams)
    save_plots(study, tmp_path)
    assert (tmp_path / "history.png").is_file() and (tmp_path / "importance.png").is_file()
    assert dict(plt.rcParams) == before


def test_a_study_whose_trials_all_scored_the_same_draws_no_importances(tmp_path):
    import optuna

    from bench.tune.study import save_plots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")  # every trial diverged: each scored 0
    study.optimize(lambda t: 0.0 * t.suggest_float("lr", 0.0, 1.0), 3)
    save_plots(study, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.png"]


def test_a_method_keeps_its_colour_in_every_figure_of_a_table():
    names = ["nngk", "contrastive", "triplet"]
    with colours.method_colours(names):
        everything = colours.hue_colours(sorted(names))
        assert colours.hue_colours(["triplet"]) == [everything[2]]
        assert colours.hue_colours(["triplet", "contrastive"]) == [everything[2], everything[0]]
        # A hue that is not one of the table's methods (a size, a run): colours of its own.
        assert colours.hue_colours(["64", "512"]) == colours.line_colours(2)
        assert colours.method_colour("nngk") == everything[1]
    assert everything == colours.line_colours(3)
    assert colours.method_colour("nngk") == "black"
    assert colours.hue_colours(["triplet"]) == colours.line_colours(1)  # outside a table


def test_a_tsne_colours_and_names_the_ten_largest_classes_and_greys_the_rest():
    labels = np.repeat(np.arange(30), np.arange(30) % 7 + 1)  # 1 to 7 points a class
    colours = tsne._class_colours(labels)
    named = [c for c, colour in colours.items() if colour != tsne.OTHER_CLASSES]
    assert len(named) == 10
    counts = np.bincount(labels)
    assert min(counts[named]) >= max(np.delete(counts, named))
    assert len(set(colours[c] for c in named)) == 10
    few = tsne._class_colours(np.arange(4))
    assert tsne.OTHER_CLASSES not in few.values() and len(set(few.values())) == 4
