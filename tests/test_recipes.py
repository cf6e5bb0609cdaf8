"""The recipe options of issue 45, each through the code that runs it: frozen batch norm and the
warm-up through the trainer's own epochs, the schedule's learning rate at each epoch (and after a
resume), the embedding layer's parameter group, the pooling against a hand computation on a
backbone's feature map, the crops' areas, the run ids they leave alone, and one run of them all
from the command line."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from bench.data.crop_area import parse_crop_scale
from bench.data.crops import Crops
from bench.data.datasets import load_run_data
from bench.models.embedding import build_model
from bench.runs.config import RunConfig
from bench.train.compute import Compute
from bench.train.presets import make_configs
from bench.train.recipes import batch_norms, check_recipe
from bench.train.trainer import Trainer
from tests.conftest import cli
from tests.fixtures.folder import make_folder

DATASET = "glyphs:classes=16,instances=10,size=12"
RECIPE = {
    "freeze_bn": True,
    "pooling": "avg+max",
    "warmup_epochs": 1,
    "schedule": "cosine",
    "embedding_lr": 10.0,
    "crop_scale": "0.16,1",
}
# RunConfig().run_id() on main before the recipe options were added (commit 6bc9b62).
MAIN_DEFAULT_ID = "digits-nngk-d64-s0-104c3c42"


def trainer(path, loss: str = "contrastive", **settings) -> Trainer:
    """A trainer of the small glyphs set (small_cnn, which has batch norm), 8-d."""
    settings = {"epochs": 3, "batch_size": 32, **settings}
    (cfg,) = make_configs(DATASET, loss, (8,), {}, **settings)
    return Trainer(cfg, path, Compute.resolve())


def copies(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def batch_norm_state(model: nn.Module) -> list[torch.Tensor]:
    """Every batch-norm layer's running mean and variance, scale and shift."""
    keys = ("running_mean", "running_var", "weight", "bias")
    return [getattr(bn, k).detach().clone() for bn in batch_norms(model) for k in keys]


def test_frozen_batch_norm_keeps_its_statistics_and_affine_over_the_trainers_epochs(tmp_path):
    frozen = trainer(tmp_path / "frozen", freeze_bn=True, epochs=2)
    assert len(batch_norms(frozen.model.backbone)) == 3
    before, backbone = batch_norm_state(frozen.model), copies(frozen.model.backbone)
    frozen.fit(test=False)
    after = batch_norm_state(frozen.model)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    convs = [k for k in backbone if k.endswith(".0.weight")]  # the rest of the backbone trains
    assert all(not torch.equal(backbone[k], frozen.model.backbone.state_dict()[k]) for k in convs)
    plain = trainer(tmp_path / "plain", epochs=2)
    before = batch_norm_state(plain.model)
    plain.fit(test=False)
    after = batch_norm_state(plain.model)
    assert not any(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters (not the batch-norm statistics) of `module`."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def test_warm_up_trains_the_embedding_layer_and_the_losss_parameters_alone(tmp_path):
    run = trainer(tmp_path / "run", loss="proxy-anchor", warmup_epochs=1)
    backbone, embed, own = (weights(m) for m in (run.model.backbone, run.model.embed, run.loss))
    assert own  # Proxy Anchor's proxies
    run.train_epoch(0)
    warmed = weights(run.model.backbone)
    assert all(torch.equal(backbone[k], warmed[k]) for k in backbone)
    assert all(not torch.equal(embed[k], v) for k, v in weights(run.model.embed).items())
    assert all(not torch.equal(own[k], v) for k, v in weights(run.loss).items())
    run.train_epoch(1)
    trained = weights(run.model.backbone)
    assert all(not torch.equal(warmed[k], trained[k]) for k in warmed)


def recorded_rates(monkeypatch) -> list[list[float]]:
    """Each epoch's learning rates, of every parameter group, as the trainer's epochs see them."""
    rates, train_epoch = [], Trainer.train_epoch

    def recording(self, epoch):
        rates.append([group["lr"] for group in self.optimizer.param_groups])
        return train_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "train_epoch", recording)
    return rates


@pytest.mark.parametrize(
    "schedule, factors",
    [
        ("cosine", [(1 + math.cos(math.pi * e / 4)) / 2 for e in range(4)]),
        ("step:1,3:0.5", [1, 0.5, 0.5, 0.25]),
        ("none", [1, 1, 1, 1]),
    ],
)
def test_the_schedule_gives_the_stated_rate_at_each_epoch(tmp_path, monkeypatch, schedule, factors):
    rates = recorded_rates(monkeypatch)
    run = trainer(tmp_path, schedule=schedule, epochs=4, lr=0.01, embedding_lr=10)
    run.fit(test=False)
    expected = [[0.01 * f, 0.1 * f] for f in factors]
    assert rates == [pytest.approx(e) for e in expected]


def test_the_schedule_survives_a_resume(tmp_path, monkeypatch):
    rates, stopped, train_epoch = [], [], Trainer.train_epoch

    def stopping(self, epoch):
        if epoch == 2 and not stopped:  # after the checkpoint of epoch 2
            stopped.append(epoch)
            raise KeyboardInterrupt
        rates.append(self.optimizer.param_groups[0]["lr"])
        return train_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "train_epoch", stopping)
    with pytest.raises(KeyboardInterrupt):
        trainer(tmp_path, schedule="cosine", epochs=4, lr=0.01).fit(test=False)
    trainer(tmp_path, schedule="cosine", epochs=4, lr=0.01).fit(test=False)
    cosine = [0.01 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(4)]
    assert rates == pytest.approx(cosine)


def test_embedding_lr_puts_the_embedding_layer_in_a_group_of_its_own(tmp_path):
    run = trainer(tmp_path / "a", loss="proxy-anchor", lr=0.002, embedding_lr=10)
    network, embedding, own = run.optimizer.param_groups
    assert embedding["params"] == list(run.model.embed.parameters())
    assert embedding["lr"] == pytest.approx(0.02) and own["lr"] == pytest.approx(0.2)
    assert {id(p) for p in network["params"]} == {id(p) for p in run.model.backbone.parameters()}
    assert network["lr"] == 0.002
    assert "the embedding layer at 10x the lr" in run.optimizer_text()
    (one,) = trainer(tmp_path / "b", lr=0.002).optimizer.param_groups  # as earlier checkpoints
    assert len(one["params"]) == len(list(run.model.parameters()))


def feature_map(model: nn.Module, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`layer`'s output as `model.features(x)` computes it."""
    seen = []
    handle = layer.register_forward_hook(lambda module, inputs, out: seen.append(out))
    model.features(x)
    handle.remove()
    return seen[0]


HAND = {
    "avg": lambda cells: cells.mean(dim=(-2, -1)),
    "max": lambda cells: cells.amax(dim=(-2, -1)),
    "avg+max": lambda cells: cells.mean(dim=(-2, -1)) + cells.amax(dim=(-2, -1)),
}


@pytest.mark.parametrize("pooling", sorted(HAND))
def test_the_pooling_is_the_hand_computation_on_the_feature_map(pooling):
    torch.manual_seed(0)
    x = torch.randn(3, 3, 16, 16)
    resnet = build_model("resnet18_tiny", 8, "none", 3, pooling=pooling).eval()
    with torch.no_grad():
        fmap = feature_map(resnet, resnet.backbone.layer4, x)  # (3, 512, 2, 2): the whole map
        assert torch.allclose(resnet.features(x), HAND[pooling](fmap), atol=1e-6)
        small = build_model("small_cnn", 8, "none", 3, pooling=pooling).eval()
        fmap = feature_map(small, small.backbone.body[3], x)  # (3, 64, 8, 8): 4x4 cells of 2x2
        cells = fmap.view(3, 64, 4, 2, 4, 2).transpose(3, 4)
        assert torch.allclose(small.features(x), HAND[pooling](cells).flatten(1), atol=1e-6)


@pytest.mark.parametrize(
    "settings, error",
    [
        ({"backbone": "vgg16", "pooling": "max"}, "--pooling max: vgg16's features are fully"),
        ({"backbone": "mlp", "pooling": "avg+max"}, "mlp takes feature vectors"),
        ({"schedule": "step:20,10:0.25"}, "expected none, cosine, or step:E1,E2,...:F"),
        ({"schedule": "linear"}, "bad --schedule 'linear'"),
        ({"crop_scale": "0.16,1"}, "--crop-mode squash crops a fixed size; give --crop-mode"),
        ({"crop_scale": "0,1", "crop_mode": "aspect"}, "0 < LOW <= HIGH <= 1"),
        ({"crop_scale": "0.5,1.2", "crop_mode": "aspect"}, "bad --crop-scale '0.5,1.2'"),
        ({"freeze_bn": True, "backbone": "small_cnn_gn"}, "small_cnn_gn has no batch-norm"),
        ({"warmup_epochs": 20}, "a warm-up of 20 epochs (--warmup-epochs, or the preset's)"),
        ({"embedding_lr": 2.0, "embedding": "gap", "dims": 64}, "a gap embedding has none"),
    ],
)
def test_recipe_settings_that_cannot_apply_are_one_line_errors(settings, error):
    with pytest.raises(ValueError) as raised:
        check_recipe(RunConfig(**settings))
    assert error in str(raised.value) and "\n" not in str(raised.value)


def test_crop_scale_crops_areas_in_its_range(tmp_path):
    root = make_folder(tmp_path / "images", classes=3, per_class=4)
    cfg = RunConfig(dataset=f"folder:{root}", resize=32, crop=16, crop_mode="aspect")
    crops = load_run_data(replace(cfg, crop_scale="0.16,1")).train.crops
    assert crops.scale == (0.16, 1.0) and load_run_data(cfg).train.crops.scale == (0.08, 1.0)
    sizes = torch.tensor([[240, 320], [320, 240], [300, 300]], dtype=torch.float64)
    sizes = sizes.repeat(1000, 1)
    for scale, low in ((crops.scale, 0.16), (Crops.scale, 0.08)):
        boxes = replace(crops, scale=scale).boxes(sizes, torch.Generator().manual_seed(0))
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) / sizes.prod(dim=1)
        assert area.min() >= low - 0.005 and area.max() <= 1  # whole pixels: a little below
        assert area.min() < low + 0.02 and area.max() > 0.95  # the range is used end to end
    assert parse_crop_scale("") == (0.08, 1.0)


def test_every_recipe_option_is_hashed_only_when_set():
    defaults = RunConfig()
    assert defaults.run_id() == MAIN_DEFAULT_ID
    ids = {replace(defaults, **{k: v}).run_id() for k, v in RECIPE.items()}
    assert len(ids) == len(RECIPE) and MAIN_DEFAULT_ID not in ids


def test_suite_and_tune_take_the_recipe_options_as_run_does(monkeypatch, tmp_path):
    from bench.cli.tune import held_settings, tune

    planned = []
    monkeypatch.setattr("bench.cli.training.run_all", lambda found, *_: planned.extend(found))
    options = ["--freeze-bn", "--pooling", "max", "--warmup-epochs", "1", "--schedule"]
    options += ["step:2:0.5", "--embedding-lr", "2", "--crop-scale", "0.16,1"]
    options += ["--crop-mode", "aspect", "--losses", "contrastive,nngk"]
    images = tmp_path / "images"  # image options: a data set of images
    for c in range(2):
        (images / f"class{c}").mkdir(parents=True)
    out = cli("suite", "--dataset", f"folder:{images}", "--dims", "8", "--seed", "0", *options,
              "--results", tmp_path / "results")  # fmt: skip
    assert out.exit_code == 0, out.output
    given = {"freeze_bn": True, "pooling": "max", "warmup_epochs": 1, "schedule": "step:2:0.5"}
    given |= {"embedding_lr": 2.0, "crop_scale": "0.16,1"}
    assert [{k: getattr(c, k) for k in RECIPE} for c in planned] == [given, given]
    assert set(RECIPE) <= {p.name for p in tune.params}
    assert held_settings(given, "digits", ["contrastive"]) == given  # in every trial
    defaults = {k: getattr(RunConfig(), k) for k in RECIPE}
    assert held_settings(defaults, "digits", ["contrastive"]) == {}  # studies keep their names


def test_the_recipe_trains_from_the_command_line_and_is_recorded(tmp_path):
    options = ["--freeze-bn", "--pooling", "avg+max", "--warmup-epochs", "1"]
    options += ["--schedule", "cosine", "--embedding-lr", "10"]
    out = cli("run", "--loss", "contrastive", "--dataset", DATASET, "--dims", "16", "--epochs",
              "3", "--batch-size", "32", *options, "--results", tmp_path / "r")  # fmt: skip
    assert out.exit_code == 0, out.output
    (run,) = (tmp_path / "r").glob("*-contrastive-*")
    config = json.loads((run / "config.json").read_text())
    assert {k: config[k] for k in RECIPE} == {**RECIPE, "crop_scale": ""}
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best_epoch"] >= 1 and "at 10x the lr" in metrics["optimizer"]
    assert cli("report", "--results", tmp_path / "r", "--out", tmp_path / "out").exit_code == 0
    setup = (tmp_path / "out" / "glyphs-classes-16-instances-10-size-12.md").read_text()
    # in RunConfig's order of the recipe settings
    assert "; avg+max pooling; warm-up epochs 1; cosine lr schedule; frozen BN;" in setup
    bad = cli("run", "--schedule", "step:a:b", "--results", tmp_path / "x")
    assert bad.exit_code == 2 and "expected none, cosine, or step:E1,E2,...:F" in bad.output


def test_the_untrained_baseline_is_pooled_as_its_runs_are(tmp_path):
    # Before: built with avg pooling whatever --pooling said, under one id for both.
    import numpy as np

    from bench.train.baseline import run_baseline
    from bench.train.compute import Compute

    tiny = "glyphs:classes=20,instances=8,size=12"
    folders = {}
    for pooling in ("avg", "avg+max"):
        cfg = RunConfig(dataset=tiny, loss="contrastive", dims=8, pooling=pooling)
        folders[pooling] = run_baseline(cfg, tmp_path, Compute.resolve("cpu"))[1]
    assert folders["avg"] != folders["avg+max"]
    with (
        np.load(folders["avg"] / "test_embeddings.npz") as a,
        np.load(folders["avg+max"] / "test_embeddings.npz") as b,
    ):
        assert not np.allclose(a["embeddings"], b["embeddings"])
    record = json.loads((folders["avg+max"] / "config.json").read_text())
    assert record["pooling"] == "avg+max"
