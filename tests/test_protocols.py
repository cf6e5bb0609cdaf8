import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import bench.data.image_cache as image_cache
from bench.cli import main
from bench.data.crops import IMAGENET_MEAN, IMAGENET_STD, Crops
from bench.data.datasets import boxes_for, image_splits, read_table
from bench.data.image_cache import build_cache, load_image, sizes_path
from bench.data.images import CachedImages
from bench.data.sources.cars196 import read_cars196
from bench.data.sources.cub import read_cub
from bench.data.sources.flowers102 import read_flowers102
from bench.data.sources.leafsnap import read_leafsnap
from bench.data.sources.tinyimagenet import read_tinyimagenet
from bench.data.splits import make_splits
from bench.evaluation.pair_scoring import pair_report, validation_threshold
from bench.protocols import get_protocol
from bench.runs.config import RunConfig
from bench.train.loaders import load_data
from bench.util.arrays import l2_normalised
from tests.fixtures.cars196 import make_cars196
from tests.fixtures.cub import make_cub
from tests.fixtures.flowers102 import make_flowers102
from tests.fixtures.folder import make_folder
from tests.fixtures.leafsnap import make_leafsnap
from tests.fixtures.tinyimagenet import make_tinyimagenet


@pytest.fixture(scope="module")
def cars(tmp_path_factory):
    return make_cars196(tmp_path_factory.mktemp("cars"), classes=6, per_class=10)


def test_metric_protocol_trains_on_the_first_half_of_the_classes(cars):
    table = read_cars196(cars)
    s = make_splits("metric", table, 0.2)
    labels = table["label"].to_numpy()
    assert set(labels[s.train]) == set(labels[s.val]) == {1, 2, 3}
    assert set(labels[s.test]) == {4, 5, 6}
    assert len(s.val) == 6 and len(s.train) == 24 and len(s.test) == 30  # all images, no boxes
    assert not set(s.train) & set(s.val)
    assert boxes_for(table, "metric") is None


def test_classify_protocol_uses_the_official_split_and_carves_validation(tmp_path):
    table = read_cub(make_cub(tmp_path, classes=4, per_class=10))
    s = make_splits("classify", table, 0.2)
    split = table["split"].to_numpy()
    assert set(split[s.train]) == set(split[s.val]) == {"train"}
    assert set(split[s.test]) == {"test"}
    assert len(s.val) == pytest.approx(0.2 * (split == "train").sum(), abs=1)
    labels = table["label"].to_numpy()
    assert set(labels[s.train]) == set(labels[s.test]) == {1, 2, 3, 4}
    boxes = boxes_for(table, "classify")
    assert boxes[0] == table.loc[0, ["x1", "y1", "x2", "y2"]].tolist()


def test_classify_protocol_keeps_flowers_own_validation_split(tmp_path):
    table = read_flowers102(make_flowers102(tmp_path))
    s = make_splits("classify", table, 0.0)
    split = table["split"].to_numpy()
    assert (split[s.train] == "train").all() and (split[s.val] == "val").all()
    assert (split[s.test] == "test").all()
    assert len(s.train) + len(s.val) + len(s.test) == len(table)


def test_classify_protocol_splits_leafsnap_field_images_50_20_30(tmp_path):
    root = make_leafsnap(tmp_path, species=4, lab_per_species=3, field_per_species=10)
    table = read_leafsnap(root)
    field = table[table["source"] == "field"].reset_index(drop=True)
    s = make_splits("classify", field, 2 / 7)
    assert (len(s.train), len(s.val), len(s.test)) == (20, 8, 12)
    for part in (s.train, s.val, s.test):
        assert set(field["label"].to_numpy()[part]) == {0, 1, 2, 3}


def test_pairs_protocol_separates_seen_and_unseen_classes(tmp_path):
    table = read_tinyimagenet(
        make_tinyimagenet(tmp_path, classes=6, train_per_class=10, val_per_class=3)
    )
    s = make_splits("pairs", table, 0.1)
    labels, split = table["label"].to_numpy(), table["split"].to_numpy()
    assert set(labels[s.train]) == set(labels[s.val]) == set(labels[s.test]) == {0, 1, 2}
    assert set(labels[s.unseen]) == {3, 4, 5}
    assert (split[s.train] == "train").all() and (split[s.val] == "train").all()
    assert (split[s.test] == "val").all() and (split[s.unseen] == "val").all()
    assert len(s.val) == 3 and len(s.test) == 9 and len(s.unseen) == 9
    # classify tests on a published test split, which Tiny ImageNet's unlabelled one is not
    # (it said its test split "holds 0 items of 0 classes")
    with pytest.raises(ValueError, match="no labelled test split"):
        make_splits("classify", table, 0.1)


def test_classify_refuses_unseen_test_classes_and_pairs_says_why_it_holds_images_out(tmp_path):
    from bench.data.sources.inshop import read_inshop
    from bench.data.sources.sop import read_sop
    from tests.fixtures.inshop import make_inshop
    from tests.fixtures.sop import make_sop

    # Both said a validation split needs 10 images a class: SOP and In-Shop test unseen classes.
    sop = read_sop(make_sop(tmp_path / "sop"))
    inshop = read_inshop(make_inshop(tmp_path / "inshop", items=16))
    for table in (sop, inshop):
        with pytest.raises(ValueError, match="classify protocol tests the classes it trains") as e:
            make_splits("classify", table, 0.1)
        assert str(e.value).endswith("use --protocol metric")
    # In-Shop publishes a test split; pairs said it had none.
    with pytest.raises(ValueError, match="pairs protocol tests its seen classes") as e:
        make_splits("pairs", inshop, 0.1)
    assert "no test split" not in str(e.value) and "use --protocol metric" in str(e.value)
    # CUB's published split tests the classes it trains: classify takes it, as it did.
    cub = read_cub(make_cub(tmp_path / "cub", per_class=24))
    s = make_splits("classify", cub, 0.1)
    assert set(cub["label"].to_numpy()[s.test]) == set(cub["label"].to_numpy()[s.train])


@pytest.mark.parametrize(
    "name, mode",
    # A 16-bit PNG opens as I;16 from Pillow 10.4 and as I before it; TIFF keeps either mode.
    [("deep.png", ("I;16", "I")), ("deep16.tif", ("I;16",)), ("deep.tif", ("I",))],
)
def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path, name, mode):
    from PIL import Image

    pixels = np.array([[0, 257 * 100], [65535, 257 * 200]], dtype=np.uint16)
    path = tmp_path / name
    image = Image.fromarray(pixels)
    (image if name != "deep.tif" else image.convert("I")).save(path)
    assert Image.open(path).mode in mode
    loaded = load_image(str(path), None, 2)
    assert loaded.dtype == np.uint8 and loaded[..., 0].tolist() == [[0, 100], [255, 200]]
    assert (loaded[..., 0] == loaded[..., 2]).all()  # grey in every channel


@pytest.mark.parametrize(
    "mode, values",
    [
        ("F", [[0.0, 100 / 255], [1.0, 200 / 255]]),  # floats in 0-1
        ("F", [[0.0, 100.0], [255.0, 200.0]]),  # floats in 0-255
        ("I", [[0, 100], [255, 200]]),  # 32-bit integers in 0-255
    ],
)
def test_float_and_32_bit_images_are_scaled_by_their_range(tmp_path, mode, values):
    # Issue 43: mode F in 0-1 decoded to pixels of 0 or 1, and mode I in 0-255 was divided by
    # 65535: near-black images, without a warning.
    from PIL import Image

    array = np.array(values, dtype=np.float32 if mode == "F" else np.int32)
    path = tmp_path / "deep.tif"
    Image.fromarray(array, mode=mode).save(path)
    assert Image.open(path).mode == mode
    loaded = load_image(str(path), None, 2)
    assert loaded[..., 0].tolist() == [[0, 100], [255, 200]]


def cached(cache, n: int) -> list[np.ndarray]:
    """Every image of a cache of n images, as (h, w, 3) uint8 arrays."""
    data = CachedImages(cache, np.arange(n), np.zeros(n), None)
    return [data.image(i) for i in range(n)]


def test_image_cache_decodes_once_and_keeps_the_aspect_ratio(cars, tmp_path, monkeypatch):
    table = read_cars196(cars).head(5)
    paths = table["path"].tolist()
    boxes = boxes_for(table.assign(split="x"), "classify")
    cache = build_cache(paths, boxes, 16, tmp_path / "cache", workers=1)
    for path, box, pixels in zip(paths, boxes, cached(cache, 5), strict=True):
        assert pixels.dtype == np.uint8 and min(pixels.shape[:2]) == 16
        assert np.array_equal(pixels, load_image(path, box, 16))
        x1, y1, x2, y2 = image_cache.box_region(Image.open(path).size, box)
        assert abs(pixels.shape[1] / pixels.shape[0] - (x2 - x1) / (y2 - y1)) < 1 / 16 * 2
    unboxed = load_image(paths[2], None, 16)  # the box was applied
    assert unboxed.shape != cached(cache, 5)[2].shape
    calls = []
    monkeypatch.setattr(image_cache, "load_image", lambda *a: calls.append(a))
    assert build_cache(paths, boxes, 16, tmp_path / "cache") == cache
    assert calls == []
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert names == sorted([cache.name, sizes_path(cache).name])
    assert image_cache.cache_key(paths, boxes, 8) != image_cache.cache_key(paths, boxes, 16)
    assert image_cache.cache_key(paths, None, 16) != image_cache.cache_key(paths, boxes, 16)


def normalised(pixels: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).float() / 255
    mean, std = (
        torch.tensor(IMAGENET_MEAN)[:, None, None],
        torch.tensor(IMAGENET_STD)[:, None, None],
    )
    return (x - mean) / std


def test_cached_images_are_cropped_a_batch_at_a_time(cars, tmp_path):
    table = read_cars196(cars).head(4)
    cache = build_cache(table["path"].tolist(), None, 16, tmp_path, workers=1)
    labels = np.array([7, 7, 8, 8])
    test = CachedImages(cache, np.arange(4), labels, Crops(12, 16, "aspect"))
    pixels, y, i = test[2]
    assert pixels.dtype == torch.uint8 and pixels.shape[0] == 3 and (y, i) == (8, 2)
    batch, ys, idx = test.collate([test[2], test[0]])
    assert ys.tolist() == [8, 7] and idx.tolist() == [2, 0]
    x = test.prepare(batch)
    assert x.shape == (2, 3, 12, 12) and x.dtype == torch.float32
    for out, row in zip(x, (2, 0), strict=True):  # the centre crop, pixels unchanged
        raw = test.image(row)
        y0, x0 = round((raw.shape[0] - 12) / 2), round((raw.shape[1] - 12) / 2)
        assert torch.allclose(out, normalised(raw[y0 : y0 + 12, x0 : x0 + 12]), atol=1e-5)
    train = CachedImages(cache, np.arange(4), labels, Crops(12, 16, "aspect", train=True))
    gen = torch.Generator().manual_seed(0)
    first = train.prepare(batch, gen)
    assert first.shape == x.shape and not torch.equal(first, train.prepare(batch, gen))
    assert torch.equal(first, train.prepare(batch, torch.Generator().manual_seed(0)))


def test_raw_inputs_of_cached_images_are_their_pixels_area_averaged(tmp_path):
    from tests.fixtures.folder import class_image

    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"{i}.png"))
        class_image(i, i, 16).save(paths[-1])
    cache = build_cache(paths, None, 16, tmp_path / "cache", workers=1)
    pixels = np.stack(cached(cache, 3))[[2, 0]].astype(np.float64) / 255  # (2, 16, 16, 3)
    data = CachedImages(cache, np.array([2, 0]), np.array([1, 0]), Crops(12, 16))
    assert np.allclose(data.inputs(side=16), pixels.transpose(0, 3, 1, 2).reshape(2, -1))
    blocks = pixels.reshape(2, 4, 4, 4, 4, 3).mean(axis=(2, 4))  # 4x4 blocks -> 4x4 pixels
    assert np.allclose(data.inputs(side=4), blocks.transpose(0, 3, 1, 2).reshape(2, -1))


def test_image_splits_label_space_and_unseen(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_tinyimagenet(tmp_path, classes=4, train_per_class=6, val_per_class=2)
    data = image_splits("tinyimagenet", "pairs", 0.2, data_root=root, resize=16, crop=16)
    assert set(data.train.labels) == {0, 1} and set(data.unseen.labels) == {2, 3}
    assert data.num_train_classes == 2 and len(data.class_names) == 4
    assert data.test[0][0].shape == (3, 16, 16)


FAST = [
    "--backbone",
    "small_cnn",
    "--pretrained",
    "none",
    "--resize",
    "20",
    "--crop",
    "16",
    "--epochs",
    "1",
    "--dims",
    "8",
    "--batch-size",
    "8",
]


@pytest.mark.parametrize("loss", ["nngk", "triplet"])
def test_metric_protocol_runs_end_to_end_on_a_miniature(cars, loss, tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    out = CliRunner().invoke(
        main,
        [
            "run",
            "--loss",
            loss,
            "--dataset",
            "cars196",
            "--data-root",
            str(cars),
            *FAST,
            "--results",
            str(tmp_path / "r"),
        ],
    )
    assert out.exit_code == 0, out.output
    runs = {
        p.name.split("-")[1]: p
        for p in (tmp_path / "r").iterdir()
        if "untrained" not in p.name and not p.name.startswith(".")  # .locks: no run
    }
    metrics = json.loads((runs[loss] / "metrics.json").read_text())
    assert metrics["dataset"] == "cars196" and metrics["dims"] == 8
    saved = np.load(runs[loss] / "test_embeddings.npz")
    assert sorted(set(saved["labels"])) == [3, 4, 5]  # the second half of the classes
    baselines = [
        json.loads(p.read_text()) for p in (tmp_path / "r").glob("*untrained*/metrics.json")
    ]
    found = sorted((b["features"], b["dims"]) for b in baselines)
    # Raw inputs: the cached pixels (20x20, under the 32-pixel cap), 3 channels.
    assert found == [("raw inputs", 3 * 20 * 20), ("untrained small_cnn (random init)", 64 * 16)]


def test_folder_dataset_runs_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path, classes=4, per_class=8)
    assert len(read_table(f"folder:{root}", tmp_path)[0]) == 32
    out = CliRunner().invoke(
        main,
        [
            "run",
            "--loss",
            "softmax",
            "--dataset",
            f"folder:{root}",
            *FAST,
            "--results",
            str(tmp_path / "r"),
        ],
    )
    assert out.exit_code == 0, out.output
    (run,) = [p for p in (tmp_path / "r").iterdir() if "softmax" in p.name]
    assert run.name.startswith("folder-") and (run / "metrics.json").is_file()


@pytest.mark.parametrize("missing", [None, "bounding_boxes.txt"])
def test_missing_data_is_a_one_line_error_naming_layout_and_source(missing, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    if missing:
        make_cub(root, classes=2, per_class=2)
        (root / "CUB_200_2011" / missing).unlink()
    dataset = "cub" if missing else "cars196"
    out = CliRunner().invoke(
        main,
        ["run", "--dataset", dataset, "--data-root", str(root), "--results", str(tmp_path / "r")],
    )
    assert out.exit_code != 0
    lines = [line for line in out.output.strip().splitlines() if "run(s) into" not in line]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.output
    assert (missing or "cars_annos.mat") in lines[0]
    assert ("caltech" if missing else "stanford") in lines[0].lower()
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def run_cli(*args):
    out = CliRunner().invoke(main, ["run", *[str(a) for a in args]])
    assert out.exit_code == 0, out.output
    return out


def finished(results, loss):
    (run,) = [p for p in results.iterdir() if f"-{loss}-" in p.name]
    return run, json.loads((run / "metrics.json").read_text())


@pytest.mark.parametrize("loss", ["softmax", "nngk"])
def test_classify_protocol_reports_test_accuracy(loss, tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_cub(tmp_path / "data", classes=4, per_class=12)
    run_cli(
        "--protocol",
        "classify",
        "--loss",
        loss,
        "--dataset",
        "cub",
        "--data-root",
        root,
        *FAST,
        "--embedding",
        "fc",  # the preset takes VGG16 FC7 itself; the miniature uses a small CNN
        "--results",
        tmp_path / "r",
    )
    run, metrics = finished(tmp_path / "r", loss)
    assert run.name.startswith("cub-classify-")
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["nll"] > 0
    assert set(get_protocol("classify").columns) <= set(metrics)  # the report's columns
    history = (run / "history.csv").read_text().splitlines()[0]
    assert "val_accuracy" in history and "val_nll" in history
    # CUB is cropped to its boxes under this protocol: the cache holds the cropped images.
    (cache,) = (tmp_path / "cache").rglob("images-20-*[0-9a-f].npy")
    table = read_cub(root)
    first = load_image(table.loc[0, "path"], boxes_for(table, "classify")[0], 20)
    assert np.array_equal(cached(cache, len(table))[0], first)


def test_classify_protocol_on_digits_uses_every_class(tmp_path):
    args = "--protocol classify --loss softmax --dataset digits --epochs 3 --lr 0.01 --dims 16"
    run_cli(*args.split(), "--results", tmp_path)
    run, metrics = finished(tmp_path, "softmax")
    saved = np.load(run / "test_embeddings.npz")
    assert sorted(set(saved["labels"])) == list(range(10))
    assert metrics["accuracy"] > 0.5  # ten classes: chance is 0.1


@pytest.mark.parametrize("dataset", ["tinyimagenet", "digits"])
def test_pairs_protocol_writes_seen_and_unseen_verification(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    args = ["--protocol", "pairs", "--loss", "contrastive", "--dataset", dataset]
    if dataset == "tinyimagenet":
        root = make_tinyimagenet(tmp_path / "data", classes=6, train_per_class=12, val_per_class=4)
        args += ["--data-root", root, *FAST]
    else:
        args += ["--epochs", "1", "--dims", "16"]
    run_cli(*args, "--results", tmp_path / "r")
    run, metrics = finished(tmp_path / "r", "contrastive")
    for split in ("seen", "unseen"):
        for key in ("accuracy", "far", "frr", "ap"):
            assert 0.0 <= metrics[f"{split}_{key}"] <= 1.0, (split, key)
        pr = (run / f"pr_{split}.csv").read_text().splitlines()
        assert pr[0] == "precision,recall,threshold" and len(pr) > 2
        categories = (run / f"categories_{split}.csv").read_text().splitlines()
        assert categories[0].startswith("label,class_name,pairs,accuracy,far,frr")
    assert metrics["threshold"] > 0
    assert set(get_protocol("pairs").columns) <= set(metrics)  # the report's columns
    # what the network was given: the crops (it read the first test image's cached size)
    assert metrics["input_size"] == ("3x16x16" if dataset == "tinyimagenet" else "1x8x8")
    history = (run / "history.csv").read_text().splitlines()[0]
    assert "val_pair_accuracy" in history
    # both baselines carry the pair metrics too, as their table's rows show them
    for base in (tmp_path / "r").glob("*-untrained-*"):
        assert set(get_protocol("pairs").columns) <= set(
            json.loads((base / "metrics.json").read_text())
        )
    if dataset == "digits":  # the raw inputs' against a plain computation of the same
        (raw,) = (tmp_path / "r").glob("*-untrained-d64-*")
        assert raw_pair_metrics(RunConfig(dataset="digits", protocol="pairs")) == pytest.approx(
            {k: v for k, v in json.loads((raw / "metrics.json").read_text()).items()
             if k.startswith(("seen_", "unseen_", "threshold"))}
        )  # fmt: skip


def raw_pair_metrics(cfg) -> dict:
    """Seen and unseen verification of the L2-normalised raw inputs at the threshold of their
    validation pairs."""
    data = load_data(cfg)

    def split(part):
        return l2_normalised(part.inputs()), np.asarray(part.labels)

    threshold = validation_threshold(*split(data.val))
    splits = {"seen": split(data.test), "unseen": split(data.unseen)}
    return pair_report(splits, threshold, data.class_names)[0]


def test_table_5_ablation_fixed_weights_and_frozen_backbone(tmp_path):
    from bench.runs.config import RunConfig
    from bench.train.compute import Compute
    from bench.train.trainer import Trainer

    cfg = RunConfig(
        protocol="classify",
        loss="nngk",
        dims=1024,
        embedding="backbone",
        epochs=1,
        freeze_backbone=True,
        loss_params={"learn_weights": False, "sigma": 1.0},
    )
    trainer = Trainer(cfg, tmp_path / "run", Compute.resolve())
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.fit()
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # batch-norm stats too
    assert torch.equal(trainer.loss.log_weights, torch.zeros_like(trainer.loss.log_weights))
    assert 0 <= metrics["accuracy"] <= 1

    learned = Trainer(
        RunConfig(
            protocol="classify",
            loss="nngk",
            epochs=1,
            freeze_backbone=True,
            loss_params={"sigma": 1.0},
        ),
        tmp_path / "learned",
        Compute.resolve(),
    )
    frozen = {k: v.clone() for k, v in learned.model.backbone.state_dict().items()}
    learned.fit()
    assert all(torch.equal(frozen[k], v) for k, v in learned.model.backbone.state_dict().items())
    assert not torch.equal(learned.loss.log_weights, torch.zeros_like(learned.loss.log_weights))


def test_training_examples_per_class_sweep_limits_only_the_training_split():
    from bench.data.datasets import load_dataset

    full = load_dataset("digits", "classify", 0.2)
    few = load_dataset("digits", "classify", 0.2, train_per_class=5)
    assert np.bincount(few.train.labels).tolist() == [5] * 10
    assert len(few.test) == len(full.test) and len(few.val) == len(full.val)


def test_fixed_weights_is_an_nngk_option():
    out = CliRunner().invoke(main, ["run", "--loss", "softmax", "--fixed-weights"])
    assert out.exit_code != 0
    assert "loss 'softmax' does not take --fixed-weights" in out.output


@pytest.mark.parametrize(
    "dataset, protocol, make",
    [
        ("cub", "metric", lambda root: make_cub(root, classes=4, per_class=10)),
        (
            "cars196",
            "classify",
            lambda root: make_cars196(root, classes=4, per_class=10, layout="torchvision"),
        ),
        ("flowers102", "classify", lambda root: make_flowers102(root, classes=4, per_class=12)),
        (
            "leafsnap",
            "classify",
            lambda root: make_leafsnap(root, species=4, lab_per_species=2, field_per_species=12),
        ),
    ],
)
def test_each_miniature_runs_its_protocols_end_to_end(
    dataset, protocol, make, tmp_path, monkeypatch
):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make(tmp_path / "data")
    run_cli(
        "--protocol",
        protocol,
        "--loss",
        "nngk",
        "--dataset",
        dataset,
        "--data-root",
        root,
        *FAST,
        "--embedding",
        "fc",
        "--results",
        tmp_path / "r",
    )
    run, metrics = finished(tmp_path / "r", "nngk")
    assert metrics["dataset"] == dataset and metrics["protocol"] == protocol
    if protocol == "classify":
        assert 0.0 <= metrics["accuracy"] <= 1.0
    config = json.loads((run / "config.json").read_text())
    assert config["protocol"] == protocol and config["resize"] == 20 and config["crop"] == 16
