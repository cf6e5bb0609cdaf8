"""Batched crops of cached images against torchvision's per-image transforms."""

import math

import numpy as np
import pytest
import torch
from torchvision.ops import roi_align
from torchvision.transforms import v2

from bench.cli.run import run
from bench.data.crops import (
    CROP_MODES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Crops,
    RaggedBatch,
    pad_batch,
)

NORMALISE = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def smooth(h: int, w: int) -> torch.Tensor:
    """A smooth image, where resampling methods may differ only a little."""
    y, x = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    channels = [x, y, (x + y) / 2]
    return (torch.stack([torch.sin(3 * c) * 0.5 + 0.5 for c in channels]) * 255).round().byte()


def test_pad_batch_puts_images_at_the_top_left_of_a_zero_canvas_portrait_ones_transposed():
    a, b = image(5, 7), image(6, 4, seed=1)
    batch = pad_batch([a, b])
    assert batch.pixels.shape == (2, 3, 5, 7) and batch.sizes.tolist() == [[5, 7], [6, 4]]
    assert batch.transposed.tolist() == [False, True]
    assert torch.equal(batch.pixels[0, :, :5, :7], a)
    assert torch.equal(batch.pixels[1, :, :4, :6], b.transpose(1, 2))
    assert batch.pixels[1, :, 4:].sum() == 0 and batch.pixels[1, :, :, 6:].sum() == 0
    assert len(batch) == 2 and isinstance(batch.to("cpu"), RaggedBatch)
    assert pad_batch([]).pixels.shape == (0, 3, 0, 0)


def test_each_crop_mode_of_run_or_of_the_crops_is_taken_by_both():
    # run's choices are written out apart from CROP_MODES (bench.cli.settings loads no torch).
    (option,) = [p for p in run.params if p.name == "crop_mode"]
    for mode in sorted({*option.type.choices, *CROP_MODES}):
        given = option.type.convert(mode, option, None)
        assert Crops(12, 16, given)(pad_batch([image(20, 33)])).shape == (1, 3, 12, 12)


@pytest.mark.parametrize("mode", ["squash", "aspect"])
@pytest.mark.parametrize("train", [False, True])
def test_portrait_images_stored_transposed_give_the_crops_of_the_images_as_given(mode, train):
    """Each crop against roi_align on that image alone, untransposed, with the same box."""
    imgs = [image(20, 33), image(41, 20, seed=1), image(20, 20, seed=2), image(57, 22, seed=3)]
    crops = Crops(12, 20, mode, train=train, flip=False)
    batch = pad_batch(imgs)
    assert batch.transposed.tolist() == [False, True, False, True]
    out = crops(batch, torch.Generator().manual_seed(3))
    boxes = crops.boxes(batch.sizes.to(torch.float64), torch.Generator().manual_seed(3))
    mean = torch.tensor(IMAGENET_MEAN)[:, None, None] * 255
    std = torch.tensor(IMAGENET_STD)[:, None, None] * 255
    for got, img, box in zip(out, imgs, boxes, strict=True):
        padded = torch.nn.functional.pad(img, (1, 1, 1, 1)).float()[None]
        roi = torch.cat([torch.zeros(1), box + 1])[None].float()
        alone = roi_align(padded, roi, 12, sampling_ratio=-1, aligned=True)[0]
        assert torch.allclose(got, (alone - mean) / std, atol=1e-4)


@pytest.mark.parametrize("mode", ["squash", "aspect"])
def test_the_evaluation_crop_of_a_square_image_is_torchvisions_centre_crop(mode):
    imgs = [image(16, 16, seed) for seed in range(3)]
    out = Crops(11, 16, mode)(pad_batch(imgs))
    reference = v2.Compose([v2.CenterCrop(11), *NORMALISE])
    for got, img in zip(out, imgs, strict=True):
        assert torch.allclose(got, reference(img), atol=1e-5)


def test_the_aspect_evaluation_crop_is_the_centre_of_each_image_unresampled():
    imgs = [image(16, 27), image(23, 16, seed=1)]
    out = Crops(12, 16, "aspect")(pad_batch(imgs))
    reference = v2.Compose([v2.CenterCrop(12), *NORMALISE])
    for got, img in zip(out, imgs, strict=True):
        assert torch.allclose(got, reference(img), atol=1e-5)


def test_a_squashed_crop_matches_torchvisions_resize_then_crop_on_a_smooth_image():
    img = smooth(40, 64)  # cached at shorter side 40; stretched to 40 x 40, centre 32
    out = Crops(32, 40, "squash")(pad_batch([img]))[0]
    reference = v2.Compose([v2.Resize((40, 40), antialias=True), v2.CenterCrop(32), *NORMALISE])
    assert (out - reference(img)).abs().mean() < 0.02  # different resamplers, the same crop


def test_squash_training_crops_are_whole_pixel_crops_of_the_zero_padded_image():
    img = image(10, 10)
    crops = Crops(8, 10, "squash", train=True, pad=2, flip=False)
    padded = v2.Compose([v2.Pad(2), *NORMALISE])(img)  # 14 x 14
    candidates = [padded[:, y : y + 8, x : x + 8] for y in range(7) for x in range(7)]
    gen = torch.Generator().manual_seed(0)
    out = crops(pad_batch([img] * 30), gen)
    seen = set()
    for got in out:
        matches = [i for i, c in enumerate(candidates) if torch.allclose(got, c, atol=1e-5)]
        assert matches, "not a crop of the padded image"
        seen.add(matches[0])
    assert len(seen) > 10  # the offsets vary


def test_flips_mirror_about_half_the_images():
    img = image(12, 12)
    crops = Crops(12, 12, "aspect", train=True, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    out = crops(pad_batch([img] * 200), torch.Generator().manual_seed(1))
    plain = v2.Compose(NORMALISE)(img)
    same = [torch.allclose(o, plain, atol=1e-5) for o in out]
    mirrored = [torch.allclose(o, plain.flip(-1), atol=1e-5) for o in out]
    assert all(a or b for a, b in zip(same, mirrored, strict=True))
    assert 70 < sum(mirrored) < 130


def test_random_resized_boxes_follow_torchvisions_distribution():
    """Area fractions and aspect ratios of our boxes against RandomResizedCrop.get_params on a
    3:2 image, over 4,000 draws each."""
    h, w, n = 120, 180, 4000
    crops = Crops(32, 120, "aspect", train=True)
    boxes = crops.boxes(
        torch.tensor([[h, w]] * n, dtype=torch.float64), torch.Generator().manual_seed(0)
    )
    bw, bh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all()
    assert (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()
    torch.manual_seed(0)
    ref = [
        v2.RandomResizedCrop.get_params(torch.zeros(3, h, w), [0.08, 1.0], [3 / 4, 4 / 3])
        for _ in range(n)
    ]
    ref_h = torch.tensor([r[2] for r in ref], dtype=torch.float64)
    ref_w = torch.tensor([r[3] for r in ref], dtype=torch.float64)
    for ours, theirs in (
        (bw * bh / (h * w), ref_w * ref_h / (h * w)),
        (torch.log(bw / bh), torch.log(ref_w / ref_h)),
    ):
        assert abs(ours.mean() - theirs.mean()) < 0.02
        assert abs(ours.std() - theirs.std()) < 0.02
    ratio = bw / bh
    assert (ratio > 3 / 4 - 0.05).all() and (ratio < 4 / 3 + 0.05).all()


def test_an_image_no_box_fits_falls_back_to_its_centre_with_the_ratio_clamped():
    crops = Crops(8, 10, "aspect", train=True, scale=(1.0, 1.0))
    boxes = crops.boxes(torch.tensor([[10.0, 100.0]]), torch.Generator().manual_seed(0))
    x1, y1, x2, y2 = boxes[0].tolist()
    assert (y1, y2) == (0, 10) and math.isclose(x2 - x1, round(10 * 4 / 3))
    assert math.isclose((x1 + x2) / 2, 50, abs_tol=0.5)


def test_unknown_crop_mode_is_refused():
    with pytest.raises(ValueError, match="squash"):
        Crops(8, 10, "stretch")


def test_the_same_seed_gives_the_same_crops_and_another_does_not():
    batch = pad_batch([image(20, 30, s) for s in range(4)])
    crops = Crops(16, 20, "aspect", train=True)
    a = crops(batch, torch.Generator().manual_seed(5))
    assert torch.equal(a, crops(batch, torch.Generator().manual_seed(5)))
    assert not torch.equal(a, crops(batch, torch.Generator().manual_seed(6)))
    assert np.isfinite(a.numpy()).all()


def test_a_run_with_aspect_crops_and_loader_workers_finishes_and_is_named_apart(
    tmp_path, monkeypatch
):
    import json

    from click.testing import CliRunner

    from bench.cli import main
    from bench.runs.config import RunConfig
    from tests.fixtures.folder import make_folder
    from tests.test_protocols import FAST

    assert RunConfig(crop_mode="squash").run_id() == RunConfig().run_id()  # old names kept
    assert RunConfig(crop_mode="aspect").run_id() != RunConfig().run_id()
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path, classes=4, per_class=8)
    args = ["run", "--loss", "contrastive", "--dataset", f"folder:{root}", *FAST, "--epochs", "2"]
    args += ["--crop-mode", "aspect", "--workers", "1", "--results", str(tmp_path / "r")]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    (run,) = (tmp_path / "r").glob("*contrastive*")
    config = json.loads((run / "config.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert config["crop_mode"] == "aspect" and 0 < metrics["map@r"] <= 1
    # Every run and baseline records its embedding's health (tests/test_health.py: the maths).
    assert metrics["health_pca_dims"] == 8 and 1 <= metrics["health_pca_components_99"] <= 8
    baselines = list((tmp_path / "r").glob("*untrained*"))
    assert len(baselines) == 2
    for baseline in baselines:
        assert "health_intra_inter_ratio" in json.loads((baseline / "metrics.json").read_text())
        # evaluated on the same crops as the run it stands beside
        assert json.loads((baseline / "config.json").read_text())["crop_mode"] == "aspect"
