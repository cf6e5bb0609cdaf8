import json
from dataclasses import fields, replace

import pytest

from bench.runs.config import RunConfig
from bench.train.choices import PRESET_NAMES
from bench.train.presets import PRESETS, make_configs, sigma_for_dims
from bench.util.names import safe_name
from tests.test_options import plan, planned  # noqa: F401 (a fixture)


def test_metric_preset_is_seed_000_section_3_1():
    configs = make_configs("cars196", "nngk", (64, 512, 1024), {})
    cfg = configs[0]
    assert (cfg.backbone, cfg.pretrained, cfg.batch_size, cfg.lr, cfg.weight_decay) == (
        "googlenet",
        "imagenet",
        20,
        1e-5,
        2e-4,
    )
    assert (cfg.resize, cfg.crop, cfg.protocol) == (256, 224, "metric")
    assert [c.loss_params["sigma"] for c in configs] == [10.0, sigma_for_dims(512), 30.0]
    assert all(
        c.loss_params["k"] == 100 and c.loss_params["update_interval"] == 10 for c in configs
    )
    # other losses get the same settings but none of NNGK's parameters
    triplet = make_configs("cars196", "triplet", (64,), {"miner": "semihard"})[0]
    assert triplet.loss_params == {"miner": "semihard"} and triplet.lr == cfg.lr


def test_sigma_grows_with_the_embedding_size_through_the_papers_range():
    assert sigma_for_dims(64) == 10.0 and sigma_for_dims(1024) == 30.0
    assert 10 < sigma_for_dims(128) < sigma_for_dims(256) < sigma_for_dims(512) < 30


@pytest.mark.parametrize(
    "dataset, val", [("cub", 0.2), ("cars196", 0.3), ("flowers102", 0.0), ("leafsnap", 2 / 7)]
)
def test_classify_preset_is_seed_000_section_3_2(dataset, val):
    (cfg,) = make_configs(dataset, "nngk", None, {}, protocol="classify")
    assert (cfg.backbone, cfg.embedding, cfg.dims, cfg.val_fraction) == (
        "vgg16",
        "backbone",
        4096,
        val,
    )
    assert cfg.loss_params["sigma"] == 100.0 and cfg.batch_size == 20 and cfg.lr == 1e-5


def test_pairs_preset_is_the_reports_model_1():
    (cfg,) = make_configs("tinyimagenet", "contrastive", None, {}, protocol="pairs")
    assert (cfg.backbone, cfg.dims, cfg.resize, cfg.crop, cfg.val_fraction) == (
        "vgg16_tiny",
        96,
        64,
        64,
        0.1,
    )


def test_overrides_win_and_the_data_root_option_is_not_itself_hashed():
    # The resolved location and a fingerprint are, once read from the data (test_data_identity).
    (cfg,) = make_configs("cub", "nngk", (64,), {"sigma": 7.0}, epochs=3, data_root="/a")
    assert cfg.epochs == 3 and cfg.loss_params["sigma"] == 7.0
    (moved,) = make_configs("cub", "nngk", (64,), {"sigma": 7.0}, epochs=3, data_root="/b")
    assert moved.run_id() == cfg.run_id()
    assert RunConfig(seed=1).run_id() != RunConfig(seed=2).run_id()


def test_folder_datasets_get_file_safe_names():
    assert safe_name("folder:/data/my birds/") == "folder-data-my-birds"
    assert RunConfig(dataset="folder:/x/y").run_id().startswith("folder-x-y-nngk-d64-s0-")


def test_each_preset_of_run_or_the_presets_is_the_runs(planned):  # noqa: F811
    # run's choices (PRESET_NAMES) are written out apart from PRESETS: the command line reads
    # them without importing the presets (and torch behind them).
    for name in sorted({*PRESET_NAMES, *PRESETS}):
        (cfg,) = plan(planned, "run", "--dataset", "cub", "--loss", "contrastive", "--preset", name)
        assert cfg.preset == name


# Run ids computed before the command line was built from RunConfig's fields (issue 23): a
# refactor of the configuration must rename no run (its skip, resume and report follow the id).
PINNED_IDS = {
    "glyphs-nngk-d64-s0-f6313792": lambda: make_configs("glyphs", "nngk", (64,), {}, seed=0)[0],
    "digits-triplet-all-d8-s1-4e66e44e": lambda: make_configs(
        "digits", "triplet", (8,), {"miner": "all"}, seed=1
    )[0],
    "cub-classify-nngk-d4096-s0-9cbc48b3": lambda: make_configs(
        "cub", "nngk", None, {}, protocol="classify"
    )[0],
    "cars196-nngk-d512-s0-7573519c": lambda: make_configs("cars196", "nngk", (64, 512), {})[1],
    "features-data-fc7.npz-softmax-d64-s0-ded84893": lambda: make_configs(
        "features:/data/fc7.npz", "softmax", None, {}
    )[0],
    "digits-contrastive-d8-s1-11e17738": lambda: replace(
        make_configs(
            "digits", "contrastive", (8,), {"neg_margin": 0.3}, seed=1, lr=0.01, weight_decay=1e-4
        )[0],
        preset="tuned",
        tuned="digits-contrastive-d8-t8-e3-f1-s0",
    ),
    "glyphs-triplet-nca-semihard-d64-s0-3f9e549a": lambda: make_configs(
        "glyphs", "triplet-nca", None, {"miner": "semihard"}, preset="liu2019", embedding="gap"
    )[0],
    "tinyimagenet-pairs-contrastive-d96-s0-e737f918": lambda: make_configs(
        "tinyimagenet", "contrastive", None, {}, protocol="pairs"
    )[0],
    "folder-x-birds-nngk-d32-s0-377a5390": lambda: make_configs(
        "folder:/x/birds",
        "nngk",
        (32,),
        {"sigma": 2.0, "learn_weights": False},
        crop_mode="aspect",
        val_split="classes",
        freeze_backbone=True,
        pretrained="none",
    )[0],
}


@pytest.mark.parametrize("run_id", sorted(PINNED_IDS))
def test_run_ids_never_change(run_id):
    assert PINNED_IDS[run_id]().run_id() == run_id


def test_every_field_says_what_it_is_and_whether_it_is_an_option():
    for setting in fields(RunConfig):
        assert setting.metadata["help"].endswith((".", ")")), setting.name
        assert isinstance(setting.metadata["option"], bool)


def test_a_config_is_read_back_from_its_record_without_its_data_identity():
    cfg = make_configs("cub", "triplet", (64,), {"miner": "all"}, epochs=3)[0]
    cfg = replace(cfg, data_location="/data/cub", data_fingerprint="abc")
    record = json.loads(json.dumps({**cfg.to_dict(), "run_id": cfg.run_id(), "device": "cpu"}))
    again = RunConfig.from_record(record)
    assert again == replace(cfg, data_location="", data_fingerprint="")
    older = {k: v for k, v in record.items() if k not in ("crop_mode", "val_split")}
    assert RunConfig.from_record(older) == again  # a field added since: its default
