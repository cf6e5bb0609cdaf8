"""Retrieval galleries: which queries, which retrieved images, which frames (checked against a
kNN computed here by hand), on real one-epoch runs of glyphs, a cached-image folder and a
features file, and on a pairs-protocol run folder written here."""

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from bench.cli import main
from bench.data.datasets import load_dataset
from bench.evaluation.pair_scoring import pairs_of
from bench.evaluation.pairs import pair_distances
from bench.report import galleries as gal
from bench.report import gallery_queries as gq
from bench.report import similarity, tsne
from bench.report.gallery_images import (
    BORDER,
    GREEN,
    RED,
    THUMB,
    item_image,
    load_splits,
    run_config,
)
from bench.report.runs import load_runs
from bench.runs.config import RunConfig
from bench.util.atomic import atomic_save_npz, atomic_write_json
from tests.fixtures.folder import class_image, make_folder

GLYPHS = "glyphs:classes=12,instances=8,size=12"
FAST = ["--loss", "contrastive", "--dims", "8", "--epochs", "1"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def trained(results):
    return sorted(p for p in results.iterdir() if "contrastive" in p.name)


def saved(run_dir):
    with np.load(run_dir / "test_embeddings.npz") as npz:
        return npz["embeddings"], npz["labels"]


def train(dataset: str, results, *options) -> None:
    out = cli("run", *FAST, "--dataset", dataset, *options, "--results", results)
    assert out.exit_code == 0, out.output


@pytest.fixture(scope="module")
def glyph_runs(tmp_path_factory):
    results = tmp_path_factory.mktemp("glyphs")
    train(GLYPHS, results, "--batch-size", "16", "--seed", "0,1")
    return results, trained(results)


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    dataset = f"folder:{make_folder(root, classes=6, per_class=6)}"
    small = ["--backbone", "small_cnn", "--pretrained", "none", "--resize", "20", "--crop", "16"]
    train(dataset, root / "results", *small, "--batch-size", "8")
    return dataset, trained(root / "results")[0]


@pytest.fixture(scope="module")
def features_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 20)
    features = (rng.normal(size=(6, 12))[labels] * 3 + rng.normal(size=(120, 12))).astype("f4")
    split = np.where(labels < 3, "train", "test")
    np.savez(root / "f.npz", features=features, labels=labels, split=split)
    train(
        f"features:{root / 'f.npz'}", root / "results", "--batch-size", "16", "--m-per-class", "8"
    )
    return root / "results", trained(root / "results")[0]


def hand_knn(emb: np.ndarray, q: int, k: int) -> np.ndarray:
    d = ((emb.astype(np.float64) - emb[q]) ** 2).sum(axis=1)
    d[q] = np.inf
    return np.argsort(d, kind="stable")[:k]


def hand_ap_at_r(emb: np.ndarray, labels: np.ndarray) -> np.ndarray:
    ap = []
    for q in range(len(labels)):
        r = int((labels == labels[q]).sum()) - 1
        hits = labels[hand_knn(emb, q, r)] == labels[q]
        ap.append((np.cumsum(hits) / np.arange(1, r + 1) * hits).sum() / r)
    return np.array(ap)


def recorder(image: np.ndarray):
    placed = []
    return placed, lambda i: placed.append(int(i)) or image


def colour_pixels(png: bytes, colour) -> int:
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return int((pixels == np.array(colour, dtype=np.uint8)).all(axis=2).sum())


def test_fixed_queries_are_the_same_for_every_run_of_a_data_set(glyph_runs, monkeypatch, tmp_path):
    _, (seed0, seed1) = glyph_runs
    labels = saved(seed0)[1]
    assert np.array_equal(labels, saved(seed1)[1])
    queries = gq.fixed_queries(labels, 6, GLYPHS)
    assert len(set(labels[queries])) == 6  # the six test classes, one query each
    more = gq.fixed_queries(labels, 10, GLYPHS)
    assert np.array_equal(more[:6], queries) and len(set(more)) == 10
    assert not np.array_equal(gq.fixed_queries(labels, 6, "glyphs"), queries)
    shown = []
    original = gal.gallery_figure
    monkeypatch.setattr(
        gal, "gallery_figure", lambda *a, **kw: shown.append(a[3].tolist()) or original(*a, **kw)
    )
    for run in (seed0, seed1):  # [fixed, worst] per run
        gal.visualize_galleries(run, tmp_path / run.name, queries=6, k=3)
    assert shown[0] == shown[2] == queries.tolist()


def test_frames_are_the_label_matches_of_a_hand_computed_knn(glyph_runs):
    emb, labels = saved(glyph_runs[1][0])
    queries = gq.fixed_queries(labels, 8, GLYPHS)
    expected = np.stack([hand_knn(emb, q, 5) for q in queries])
    found = gq.retrieved(emb, queries, 5)
    np.testing.assert_array_equal(found, expected)
    right = gq.frame_decisions(labels, queries, found)
    np.testing.assert_array_equal(right, labels[expected] == labels[queries][:, None])
    assert right.any() and not right.all()  # one epoch: some of each
    placed, images_of = recorder(np.zeros((12, 12, 3), np.uint8))
    gal.gallery_figure(images_of, emb, labels, queries, k=5)
    assert placed == np.column_stack([queries, expected]).ravel().tolist()


def test_a_small_example_frames_green_and_red_pixels():
    emb = np.array([[0.0], [1.0], [5.0], [6.0], [20.0], [21.0]])
    labels = np.array([0, 0, 1, 1, 2, 3])
    found = gq.retrieved(emb, np.array([0, 2, 4]), 2)
    assert found.tolist() == [[1, 2], [3, 1], [5, 3]]
    right = gq.frame_decisions(labels, np.array([0, 2, 4]), found)
    assert right.tolist() == [[True, False], [True, False], [False, False]]
    grey = np.full((10, 10, 3), 128, np.uint8)
    green = gal.gallery_figure(lambda i: grey, emb, labels, np.array([0]), k=1)
    red = gal.gallery_figure(lambda i: grey, emb, labels, np.array([4]), k=1)
    frame = (THUMB + 2 * BORDER) ** 2 - THUMB**2  # a whole frame of the one retrieved image
    assert colour_pixels(green, GREEN) >= frame and colour_pixels(green, RED) == 0
    assert colour_pixels(red, RED) >= frame and colour_pixels(red, GREEN) == 0


def test_a_gallery_says_what_its_frames_mean_above_it(monkeypatch):
    titles = []
    monkeypatch.setattr(gal, "grid_figure", lambda rows, title, widths: titles.append(title))
    grey = np.full((10, 10, 3), 128, np.uint8)
    emb, labels = np.arange(6.0)[:, None], np.array([0, 0, 1, 1, 2, 2])
    gal.gallery_figure(lambda i: grey, emb, labels, np.array([0]), k=3, title="run x")
    assert titles == [
        "run x\neach row: a query (blue frame), then its 3 nearest test images, framed green "
        "where of the query's class, red where of another"
    ]


def test_the_worst_gallery_shows_the_queries_of_lowest_average_precision(glyph_runs, monkeypatch):
    emb, labels = saved(glyph_runs[1][0])
    ap = hand_ap_at_r(emb, labels)
    drawn = {}
    monkeypatch.setattr(gal, "gallery_figure", lambda *a: drawn.update(queries=a[3], notes=a[7]))
    gal.worst_figure(lambda i: None, emb, labels, 5, 3, "worst", ())
    np.testing.assert_allclose(ap[drawn["queries"]], np.sort(ap)[:5])
    assert drawn["notes"] == [f"AP@R {a:.2f}" for a in np.sort(ap)[:5]]


def test_compare_prefers_disagreements_and_refuses_another_data_set(
    glyph_runs, folder_run, tmp_path
):
    labels = np.repeat(np.arange(4), 5)
    right_a, right_b = np.ones(20, bool), np.ones(20, bool)
    right_b[[3, 17]] = False
    chosen = gq.compare_queries(labels, right_a, right_b, 4, "x").tolist()
    order = [i for i in gq.fixed_order(labels, "x") if i not in (3, 17)]
    assert sorted(chosen[:2]) == [3, 17] and chosen[2:] == order[:2]
    _, (seed0, seed1) = glyph_runs
    written = gal.visualize_galleries(seed0, tmp_path / "ok", compare=seed1, queries=3)
    assert written[-1].name == f"gallery-vs-{seed1.name}.png"
    refused = CliRunner().invoke(
        main,
        ["visualize", str(seed0), "--out", str(tmp_path / "no"), "--compare", str(folder_run[1])],
    )
    assert refused.exit_code == 1 and "cannot compare" in refused.output
    assert not (tmp_path / "no").exists()  # refused before anything was drawn


def test_cached_images_and_glyph_tensors_are_shown_as_pixels(folder_run, tmp_path):
    run = folder_run[1]
    written = gal.visualize_galleries(run, tmp_path, queries=4, k=3)
    assert [p.name for p in written] == ["gallery-fixed.png", "gallery-worst.png"]
    test = load_splits(run_config(run)).test
    colour = item_image(test, 0)
    assert np.array_equal(colour, test.image(0)) and np.ptp(colour, axis=2).any()  # not grey
    glyphs = load_dataset(GLYPHS).test
    grey = item_image(glyphs, 5)
    expected = np.round(glyphs[5][0].numpy()[0] * 255).astype(np.uint8)
    assert grey.shape == (12, 12, 3) and np.array_equal(grey[..., 1], expected)


def test_a_feature_file_run_has_no_gallery_but_its_other_figures(
    features_run, tmp_path, monkeypatch
):
    results, run = features_run
    monkeypatch.setattr(tsne, "joint_tsne", lambda *_: b"t-SNE")  # seconds, and not tested here
    out = cli("visualize", run, "--out", tmp_path)
    assert out.exit_code == 0 and "holds feature vectors, no images" in out.output
    assert {p.name for p in tmp_path.iterdir()} == {"tsne.png", "similarity.png"}
    with pytest.raises(ValueError, match="holds feature vectors, no images"):
        item_image(load_dataset(run_config(run).dataset).test, 0)
    df, _ = load_runs(results)
    assert gal.gallery_files(df, df["table"].iloc[0]) == {}


def test_the_report_shows_each_losss_best_run_on_the_fixed_queries(glyph_runs):
    results, runs = glyph_runs
    df, _ = load_runs(results)
    table = df["table"].iloc[0]
    best = gal.best_runs(df)
    trained_rows = df[df["loss"] == "contrastive"]
    assert best["run"].tolist() == [trained_rows.sort_values("map@r")["run"].iloc[-1]]
    files = gal.gallery_files(df, table)
    assert list(files) == [f"{table}-gallery-contrastive.png"]
    assert Image.open(io.BytesIO(files[f"{table}-gallery-contrastive.png"])).size[0] > 300


def test_pair_errors_are_the_hardest_false_accepts_and_rejects():
    d = np.array([0.1, 0.5, 0.2, 0.9, 0.3, 0.35, 0.6])
    same = np.array([0, 0, 1, 1, 0, 1, 1])
    accepts, rejects = gq.pair_errors(d, same, 0.4, 5)
    assert accepts.tolist() == [0, 4] and rejects.tolist() == [3, 6]
    assert [a.tolist() for a in gq.pair_errors(d, same, 0.4, 1)] == [[0], [3]]


def test_a_pairs_run_draws_its_errors_at_its_threshold(tmp_path):
    cfg = RunConfig(dataset="digits", protocol="pairs", dims=4)
    labels = np.asarray(load_dataset("digits", "pairs").test.labels)
    emb = np.random.default_rng(0).normal(size=(len(labels), 4)).astype(np.float32)
    pairs = gq.scored_pairs(labels)
    dist = pair_distances(emb, pairs)
    threshold = float(np.median(dist))
    run = tmp_path / "run"
    atomic_write_json(run / "config.json", cfg.to_dict())
    atomic_write_json(run / "metrics.json", {"threshold": threshold})
    atomic_save_npz(run / "test_embeddings.npz", embeddings=emb, labels=labels)
    scored = {tuple(p) for p in pairs_of(labels, 4)[:, :2].tolist()}
    assert {tuple(p) for p in pairs[:, :2].tolist()} <= scored
    assert len({tuple(sorted(p)) for p in pairs[:, :2].tolist()}) == len(pairs)
    placed, images_of = recorder(np.zeros((8, 8, 3), np.uint8))
    gal.pair_errors_figure(images_of, pairs, dist, labels, threshold, n=3)
    wrong_class = np.flatnonzero((pairs[:, 2] == 0) & (dist <= threshold))
    far_same = np.flatnonzero((pairs[:, 2] == 1) & (dist > threshold))
    fa = wrong_class[np.argsort(dist[wrong_class])][:3]
    fr = far_same[np.argsort(-dist[far_same])][:3]
    rows = [[*pairs[a, :2], *pairs[r, :2]] for a, r in zip(fa, fr, strict=True)]
    assert placed == np.array(rows).ravel().tolist()
    written = gal.visualize_galleries(run, tmp_path / "out", queries=3, k=2)
    assert [p.name for p in written] == [
        "gallery-fixed.png",
        "gallery-worst.png",
        "pair-errors.png",
    ]
    assert colour_pixels(written[2].read_bytes(), RED) > 0


def test_the_galleries_search_on_the_device_they_are_given(glyph_runs, tmp_path, monkeypatch):
    """The worst queries' AP@R and the top-1 comparison by torch (on CPU tensors here) draw
    the same galleries as faiss's searches."""
    from bench.evaluation import retrieval
    from bench.util import torch_knn

    _, (seed0, seed1) = glyph_runs
    faiss = gal.visualize_galleries(seed0, tmp_path / "faiss", compare=seed1, queries=4, k=3)
    searched, scored = [], []
    knn, scores = torch_knn.torch_neighbours, retrieval.DeviceSearch
    monkeypatch.setattr(torch_knn, "torch_neighbours", lambda *a: searched.append(a) or knn(*a))
    monkeypatch.setattr(retrieval, "DeviceSearch", lambda *a: scored.append(a) or scores(*a))
    on = torch.device("cpu")
    found = gal.visualize_galleries(seed0, tmp_path / "torch", seed1, queries=4, k=3, device=on)
    assert len(searched) == 2 and len(scored) == 1  # each run's top-1; every query's AP@R
    assert [p.name for p in found] == [p.name for p in faiss]
    for a, b in zip(faiss, found, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_visualize_searches_its_galleries_on_its_device(glyph_runs, tmp_path, monkeypatch):
    from bench.util import torch_knn

    _, (seed0, seed1) = glyph_runs
    searched = []
    knn = torch_knn.torch_neighbours
    monkeypatch.setattr(torch_knn, "torch_neighbours", lambda *a: searched.append(a) or knn(*a))
    monkeypatch.setattr(torch_knn, "search_device", lambda device: torch.device("cpu"))
    args = ["visualize", seed0, "--compare", seed1, "--out", tmp_path, "--device", "cpu"]
    out = cli(*args, "--queries", "3")
    assert out.exit_code == 0 and len(searched) == 2, out.output  # the CPU taken for a GPU


def test_compare_draws_the_comparison_alone(glyph_runs, tmp_path, monkeypatch):
    # Before: --compare drew the run's t-SNE (minutes on a large run), its similarity scatter
    # and its own two galleries, to make the one comparison asked for.
    _, (seed0, seed1) = glyph_runs

    def not_asked(*args, **kwargs):
        raise AssertionError("drawn without being asked for")

    monkeypatch.setattr(tsne, "joint_tsne", not_asked)
    monkeypatch.setattr(gal, "worst_figure", not_asked)
    monkeypatch.setattr(gal, "gallery_figure", not_asked)  # the fixed queries' gallery
    monkeypatch.setattr(similarity, "similarity_scatter", not_asked)
    out = cli("visualize", seed0, "--compare", seed1, "--out", tmp_path, "--queries", "3")
    assert out.exit_code == 0, out.output
    assert [p.name for p in tmp_path.iterdir()] == [f"gallery-vs-{seed1.name}.png"]
    assert str(tmp_path / f"gallery-vs-{seed1.name}.png") in out.output.splitlines()


def test_galleries_of_images_changed_since_the_run_are_refused_and_left_out(tmp_path):
    # Before: visualize framed other images as the run's queries and neighbours, exit 0.
    root = make_folder(tmp_path, classes=6, per_class=6)
    small = ["--backbone", "small_cnn", "--pretrained", "none", "--resize", "20", "--crop", "16"]
    results = tmp_path / "results"
    train(f"folder:{root}", results, *small, "--batch-size", "8")
    (run,) = trained(results)
    first = CliRunner().invoke(main, ["report", "--results", str(results)])
    assert first.exit_code == 0 and any((results / "report").glob("*-gallery-contrastive.png"))
    for image in sorted(p for p in root.rglob("*") if p.suffix.lower() in (".png", ".jpg"))[-4:]:
        class_image(0, 99, size=24).save(image)  # other pixels, under the same names
    out = CliRunner().invoke(main, ["visualize", str(run), "--out", str(tmp_path / "v")])
    assert out.exit_code == 1 and "its images changed or moved since the run" in out.output
    assert out.output.strip().endswith("or draw the rest alone: --no-gallery")
    assert not (tmp_path / "v").exists()  # refused before anything was drawn
    again = CliRunner().invoke(main, ["report", "--results", str(results)])
    assert again.exit_code == 0, again.output  # the rest of the report is whole
    assert "gallery_files left out (folder:" in again.output
    assert "its images changed or moved since the run" in again.output
    shutil.rmtree(root)  # images not on this machine: likewise named, no failure
    gone = CliRunner().invoke(main, ["report", "--results", str(results)])
    assert gone.exit_code == 0 and "its images are not at hand" in gone.output


def test_visualize_never_writes_into_the_runs_image_folder(folder_run):
    dataset, run = folder_run
    root = Path(dataset.removeprefix("folder:"))
    before = sorted(root.rglob("*"))
    out = CliRunner().invoke(main, ["visualize", str(run), "--out", str(root / "views")])
    assert out.exit_code == 1 and f"--out {root / 'views'} lies inside the data folder" in (
        out.output
    )
    assert sorted(root.rglob("*")) == before


def test_a_class_name_that_is_not_utf8_is_captioned(tmp_path):
    # Before: a Latin-1 folder name ('caf\xe9') reached matplotlib as a surrogate, and visualize
    # ended in its TypeError.
    import matplotlib.pyplot as plt

    from bench.report.gallery_images import class_name

    name = class_name([b"caf\xe9".decode("utf-8", "surrogateescape")], 0)
    assert name == "caf\ufffd"
    figure = plt.figure()
    figure.text(0.5, 0.5, name)
    figure.savefig(tmp_path / "caption.png")
    plt.close(figure)


def test_a_protocol_with_a_gallery_shows_its_queries_searched_in_the_gallery_only():
    # In-Shop: queries and gallery are two views of each item. The galleries took any test
    # item as a query and searched it among all the others, queries too, and the worst
    # queries' AP@R was not the run's.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 4)
    emb = rng.normal(size=(24, 8)).astype(np.float32)
    gallery = np.tile([False, False, True, True], 6)  # two queries, two gallery images an item
    queries = gq.fixed_queries(labels, 5, "inshop", gallery)
    assert len(queries) == 5 and not gallery[queries].any()
    found = gq.retrieved(emb, queries, 3, gallery)
    assert gallery[found].all()
    # the plain search, in the gallery alone
    g = np.flatnonzero(gallery)
    d = ((emb[queries, None] - emb[None, g]) ** 2).sum(-1)
    assert found.tolist() == g[np.argsort(d, axis=1, kind="stable")[:, :3]].tolist()
    every = gq.retrieved(emb, queries, 50, gallery)  # more than the gallery holds: all of it
    assert every.shape == (5, 12) and all(sorted(row) == g.tolist() for row in every.tolist())
    ap = gq.query_ap(emb, labels, gallery=gallery)
    assert np.isnan(ap[gallery]).all()
    from bench.evaluation.metrics import evaluate_gallery

    q = ~gallery
    expected = evaluate_gallery(emb[q], labels[q], emb[gallery], labels[gallery]).metrics["map@r"]
    assert np.nanmean(ap) == pytest.approx(expected)
    right = gq.top1_correct(emb, labels, gallery=gallery)
    assert not right[gallery].any()
    picked = gq.compare_queries(labels, right, ~right, 4, "inshop", gallery)
    assert not gallery[picked].any()
