"""The presets that express the field's recipes (issue 45, item 3): the Reality Check SOP preset
with BN-Inception, frozen batch norm and 16-100 % crops; In-Shop with Kim et al. 2020's warm-up
and cuts; the named presets `proxy-anchor` (Kim et al. 2020's CUB, Cars196, SOP and In-Shop
commands) and `vit` (ViT-S/16 with DINO weights, Ermolov et al. 2022), their optimizer and
schedule as the trainer builds them, their step counts against the harness's splits, what they
give the built-in sets, the options that still win over them, and a run of each from the command
line on a small glyphs set."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from bench.data.crop_area import parse_crop_scale
from bench.data.splits import carve_validation
from bench.train.optimizers import make_optimizer
from bench.train.presets import GLYPHS, make_configs
from bench.train.recipes import check_recipe, make_scheduler
from losses import get_loss_class
from tests.conftest import cli

DATASET = "glyphs:classes=16,instances=10,size=12"  # 8 training classes, 12 px


def values(cfg, expected: dict) -> dict:
    return {key: getattr(cfg, key) for key in expected}


def rates(cfg, epochs: int | None = None) -> list[float]:
    """The network's learning rate in each epoch of the run (the first epoch's first), as the
    trainer's optimizer and schedule give it, over a layer and the loss's parameters."""
    loss = get_loss_class("proxy-anchor")(num_classes=4, dims=2)
    optimizer = make_optimizer(cfg, nn.Linear(3, 2), loss)
    scheduler = make_scheduler(cfg.schedule, optimizer, cfg.epochs)
    seen = []
    for _ in range(epochs or cfg.epochs):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return seen


def test_the_sop_preset_is_the_reality_checks_bn_inception_frozen_bn_and_crops():
    (cfg,) = make_configs("sop", "contrastive", None, {})
    expected = dict(backbone="bninception", freeze_bn=True, crop_scale="0.16,1", crop=227)
    assert values(cfg, expected) == expected
    assert parse_crop_scale(cfg.crop_scale) == (0.16, 1.0)  # 16-100 % of the area
    assert (cfg.crop_mode, cfg.optimizer, cfg.lr, cfg.dims) == ("aspect", "rmsprop", 1e-6, 128)
    check_recipe(cfg)  # the crop's area with random-resized crops; BN-Inception has batch norm


def test_the_inshop_preset_is_kim_et_als_in_shop_command():
    (cfg,) = make_configs("inshop", "proxy-anchor", None, {}, protocol="query-gallery")
    expected = dict(backbone="bninception", dims=512, batch_size=180, optimizer="adamw", lr=6e-4,
                    weight_decay=1e-4, epochs=60, pooling="avg+max", warmup_epochs=1,
                    freeze_bn=False, schedule="step:20,40:0.25", crop=224, resize=256)  # fmt: skip
    assert values(cfg, expected) == expected  # --bn-freeze 0 in their In-Shop command
    check_recipe(cfg)
    seen = rates(cfg)  # StepLR(step 20, gamma 0.25) over 60 epochs
    assert seen[:20] == [6e-4] * 20
    assert seen[20:40] == pytest.approx([1.5e-4] * 20)
    assert seen[40:] == pytest.approx([3.75e-5] * 20)


def test_the_proxy_anchor_preset_is_kim_et_als_cub_command():
    (cfg,) = make_configs("cub", "proxy-anchor", None, {}, preset="proxy-anchor")
    expected = dict(backbone="bninception", pretrained="imagenet", dims=512, batch_size=180,
                    optimizer="adamw", lr=1e-4, weight_decay=1e-4, epochs=60, pooling="avg+max",
                    freeze_bn=True, warmup_epochs=1, resize=256, crop=224, crop_mode="aspect",
                    preset="proxy-anchor", embedding="fc")  # fmt: skip
    assert values(cfg, expected) == expected
    check_recipe(cfg)
    halved = [1e-4 * 0.5 ** (epoch // 10) for epoch in range(60)]  # StepLR(10, 0.5)
    assert rates(cfg) == pytest.approx(halved)
    loss = get_loss_class("proxy-anchor")(num_classes=4, dims=2)
    optimizer = make_optimizer(cfg, nn.Linear(3, 2), loss)
    assert type(optimizer) is torch.optim.AdamW
    network, proxies = optimizer.param_groups
    assert (network["lr"], network["weight_decay"]) == (1e-4, 1e-4)
    assert proxies["lr"] == pytest.approx(1e-2)  # their proxies at 100x the lr


def test_the_proxy_anchor_preset_takes_each_data_sets_command():
    (cars,) = make_configs("cars196", "proxy-anchor", None, {}, preset="proxy-anchor")
    assert (cars.schedule, cars.lr, cars.freeze_bn) == ("step:20,40:0.5", 1e-4, True)
    (inshop,) = make_configs("inshop", "proxy-anchor", None, {}, protocol="query-gallery")
    for dataset, protocol in (("sop", "metric"), ("inshop", "query-gallery")):
        (cfg,) = make_configs(dataset, "proxy-anchor", None, {}, protocol, preset="proxy-anchor")
        # In-Shop's own preset is their code's already: the preset sets nothing there
        named = {"sop": "proxy-anchor", "inshop": ""}[dataset]
        assert cfg.to_dict() == {**inshop.to_dict(), "dataset": dataset, "protocol": protocol,
                                 "preset": named}  # fmt: skip
    assert (inshop.lr, inshop.freeze_bn, inshop.val_split) == (6e-4, False, "classes")


def test_the_vit_preset_is_the_vit_track_of_ermolov_et_al():
    (cfg,) = make_configs("cub", "contrastive", None, {}, preset="vit")
    expected = dict(backbone="timm:vit_small_patch16_224.dino", pretrained="imagenet", dims=384,
                    batch_size=900, m_per_class=9, optimizer="adamw", lr=1e-5, weight_decay=0.01,
                    resize=256, crop=224, crop_mode="aspect", crop_scale="0.2,1",
                    freeze_bn=False, warmup_epochs=0, schedule="none")  # fmt: skip
    assert values(cfg, expected) == expected
    check_recipe(cfg)
    (sop,) = make_configs("sop", "contrastive", None, {}, preset="vit")
    assert (sop.resize, sop.m_per_class, sop.val_split, sop.lr) == (224, 2, "classes", 1e-5)


@pytest.mark.parametrize(
    "dataset, images, classes, their_steps",
    [("cub", 5864, 100, 50), ("cars196", 8054, 98, 300)],  # training images and classes
)
def test_the_vit_presets_epochs_give_their_steps_on_the_harnesss_split(
    dataset, images, classes, their_steps
):
    # Their epoch is one batch of every training class x 9; here a pass over the training images
    # left after validation's fifth (carve_validation), in whole batches (EpochBatches).
    (cfg,) = make_configs(dataset, "contrastive", None, {}, preset="vit")
    assert cfg.batch_size == classes * cfg.m_per_class
    labels = np.sort(np.arange(images) % classes)
    train, _ = carve_validation(labels, cfg.val_fraction)
    steps = cfg.epochs * (len(train) // cfg.batch_size)
    assert their_steps <= steps < their_steps + len(train) // cfg.batch_size


def test_the_vit_presets_model_and_normalisation_are_dino_vit_s16s():
    timm = pytest.importorskip("timm")
    from bench.models.timm_backbones import check_timm_backbone, timm_input

    (cfg,) = make_configs("cub", "contrastive", None, {}, preset="vit")
    check_timm_backbone(cfg.backbone)  # a model and tag timm has
    assert cfg.backbone.partition(":")[2] in timm.list_pretrained("vit_small_patch16_224*")
    spec = timm_input(cfg.backbone)
    assert (spec.size, spec.fixed) == (224, True)
    assert spec.mean == pytest.approx((0.485, 0.456, 0.406))  # ImageNet's, as theirs for DINO


@pytest.mark.parametrize(
    "preset, dims, recipe",
    [
        ("proxy-anchor", 512, {"pooling": "avg+max", "warmup_epochs": 0, "freeze_bn": False}),
        ("vit", 384, {"pooling": "avg", "warmup_epochs": 0, "optimizer": "sgd"}),
    ],
)
def test_on_glyphs_a_recipe_keeps_the_glyphs_preset_with_its_size(preset, dims, recipe):
    for loss, lr in (("contrastive", 0.01), ("proxy-anchor", 0.001)):  # the glyphs preset's
        (cfg,) = make_configs("glyphs", loss, None, {}, preset=preset)
        assert (cfg.backbone, cfg.dims, cfg.lr, cfg.epochs) == ("small_cnn", dims, lr, 10)
        assert values(cfg, recipe) == recipe
        assert cfg.batch_size == GLYPHS.config["batch_size"] and cfg.pretrained == "none"
    (digits,) = make_configs("digits", "contrastive", None, {}, preset=preset)
    assert (digits.backbone, digits.dims, digits.lr) == ("small_cnn", dims, 1e-3)


def test_the_options_given_win_over_a_recipe_preset():
    # Their ResNet-50 command on CUB, given over the preset's BN-Inception one.
    resnet = dict(backbone="resnet50", batch_size=120, warmup_epochs=5, freeze_bn=False,
                  schedule="step:5,10:0.5", pooling="avg", lr=2e-4)  # fmt: skip
    (cfg,) = make_configs("cub", "proxy-anchor", (128,), {}, preset="proxy-anchor", **resnet)
    assert values(cfg, resnet) == resnet and cfg.dims == 128
    # From scratch: the from-scratch rate, batch norm trains and no warm-up, unless given.
    (scratch,) = make_configs("cub", "proxy-anchor", None, {}, preset="proxy-anchor",
                              pretrained="none")  # fmt: skip
    assert (scratch.lr, scratch.freeze_bn, scratch.warmup_epochs) == (3e-4, False, 0)
    (frozen,) = make_configs("cub", "proxy-anchor", None, {}, preset="proxy-anchor",
                             pretrained="none", freeze_bn=True, warmup_epochs=1)  # fmt: skip
    assert (frozen.freeze_bn, frozen.warmup_epochs) == (True, 1)
    (vit,) = make_configs("cub", "contrastive", None, {}, preset="vit", lr=3e-5,
                          backbone="timm:vit_small_patch16_224.augreg_in21k_ft_in1k")  # fmt: skip
    assert (vit.lr, vit.dims, vit.backbone.endswith("in1k")) == (3e-5, 384, True)


@pytest.fixture
def planned(monkeypatch):
    """The configs a command would train (none is trained)."""
    configs = []
    monkeypatch.setattr("bench.cli.training.run_all", lambda found, *_: configs.extend(found))
    monkeypatch.setattr("bench.data.presence.check_data_present", lambda *_: None)  # no cub here
    return configs


def test_no_freeze_bn_on_the_command_line_undoes_a_presets(planned):
    args = ["run", "--dataset", "cub", "--loss", "proxy-anchor", "--preset", "proxy-anchor"]
    assert cli(*args).exit_code == 0
    assert [c.freeze_bn for c in planned] == [True]
    planned.clear()
    out = cli(*args, "--no-freeze-bn", "--backbone", "resnet50", "--warmup-epochs", "5")
    assert out.exit_code == 0, out.output
    assert [(c.freeze_bn, c.backbone, c.warmup_epochs) for c in planned] == [(False, "resnet50", 5)]
    planned.clear()
    assert (
        cli("run", "--dataset", "glyphs", "--dims", "8", "--freeze-bn").exit_code == 0
    )  # as before
    assert [c.freeze_bn for c in planned] == [True]
    # The preset's frozen batch norm on a network without: the error names the way out.
    (vgg,) = make_configs(
        "cub", "proxy-anchor", None, {}, preset="proxy-anchor", backbone="small_cnn_gn"
    )
    with pytest.raises(ValueError, match="small_cnn_gn has no batch-norm .* give --no-freeze-bn"):
        check_recipe(vgg)


def test_the_suite_runs_its_losses_under_a_recipe_preset(planned):
    out = cli("suite", "--dataset", "cub", "--preset", "proxy-anchor", "--losses",
              "contrastive,proxy-anchor", "--seeds", "0")  # fmt: skip
    assert out.exit_code == 0, out.output
    assert sorted((c.loss, c.dims, c.pooling, c.embedding, c.preset) for c in planned) == [
        ("contrastive", 512, "avg+max", "fc", "proxy-anchor"),
        ("proxy-anchor", 512, "avg+max", "fc", "proxy-anchor"),
    ]


def test_an_unknown_preset_names_the_recipe_presets():
    with pytest.raises(ValueError, match="expected one of: liu2019, proxy-anchor, vit$"):
        make_configs("cub", "npair", None, {}, preset="proxy-anchr")
    out = cli("run", "--preset", "proxy-anchr")
    assert out.exit_code == 2 and "'liu2019', 'proxy-anchor', 'vit'" in out.output
    help_text = " ".join(cli("run", "--help").output.split())
    assert "anchor (Kim et al. 2020's code" in help_text and "vit (ViT-S/16" in help_text


def trained(results) -> tuple[dict, dict]:
    """The config and metrics of the one proxy-anchor run in `results`."""
    (run,) = [p for p in results.glob("glyphs-*-proxy-anchor-*") if (p / "metrics.json").exists()]
    return tuple(json.loads((run / name).read_text()) for name in ("config.json", "metrics.json"))


def values_of(record: dict, keys: str) -> list:
    return [record[key] for key in keys.split()]


def test_the_proxy_anchor_preset_trains_on_glyphs_from_the_command_line(tmp_path):
    out = cli("run", "--loss", "proxy-anchor", "--dataset", DATASET, "--preset", "proxy-anchor",
              "--epochs", "1", "--batch-size", "32", "--results", tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    config, metrics = trained(tmp_path)
    keys = "preset dims pooling backbone optimizer lr freeze_bn warmup_epochs"
    assert values_of(config, keys) == ["proxy-anchor", 512, "avg+max", "small_cnn", "sgd", 1e-3,
                                       False, 0]  # fmt: skip
    assert metrics["dims"] == 512 and metrics["best_epoch"] == 1
    assert "the loss's parameters at 100x the lr" in metrics["optimizer"]
    assert 0 <= metrics["recall@1"] <= 1


def test_the_vit_preset_trains_a_vit_on_glyphs_from_the_command_line(tmp_path):
    # On glyphs the vit preset sets only the size (384): its runs are glyphs' own, the preset
    # said and left out of their record, so that it names no table of its own.
    pytest.importorskip("timm")
    out = cli("run", "--loss", "proxy-anchor", "--dataset", "glyphs:classes=8,instances=6",
              "--preset", "vit", "--backbone", "timm:vit_tiny_patch16_224", "--pretrained",
              "none", "--crop", "32", "--epochs", "1", "--batch-size", "8",
              "--results", tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    config, metrics = trained(tmp_path)
    assert values_of(config, "preset dims backbone crop") == [
        "",
        384,
        "timm:vit_tiny_patch16_224",
        32,
    ]
    assert metrics["dims"] == 384 and 0 <= metrics["recall@1"] <= 1
