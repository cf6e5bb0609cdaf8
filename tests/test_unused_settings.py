"""Settings a run leaves unused (issue 69, items 1, 2 and 15): refused when given, at their
defaults in a baseline's identity, in no row's label; a preset that sets nothing for a data set
names no table; a loss parameter left out is a value that splits rows."""

from dataclasses import fields

import pytest

from bench.report.runs import load_runs
from bench.runs.config import RunConfig
from bench.train.baseline import baseline_config
from bench.train.presets import make_configs
from tests.setting_values import other
from tests.test_report_tables import make_run

VIT = "timm:vit_tiny_patch16_224"


# What each setting of the image pipeline applies to, as RunConfig declares it.
APPLIES = {f.name: f.metadata["applies"] for f in fields(RunConfig) if f.metadata["applies"]}


@pytest.mark.parametrize("name", sorted(APPLIES))
def test_a_setting_is_taken_by_the_runs_it_applies_to_and_refused_by_the_others(name):
    # CUB's images are resized and cropped (the settings given together, as they fit);
    # glyphs' are used as they are, but at the crop of a backbone built for its crop's size
    # (a timm model).
    (cub,) = make_configs("cub", "contrastive", (16,), {}, **{n: other(n) for n in APPLIES})
    assert getattr(cub, name) == other(name)
    given = {name: other(name)}
    refused = f"--{name.replace('_', '-')}: glyphs's inputs are used as they are"
    with pytest.raises(ValueError, match=f"^{refused}"):
        make_configs("glyphs", "contrastive", (16,), {}, backbone="small_cnn", **given)
    if APPLIES[name] == "crop":
        (vit,) = make_configs("glyphs", "contrastive", (16,), {}, backbone=VIT, **given)
        assert getattr(vit, name) == other(name)
    else:
        with pytest.raises(ValueError, match=f"^{refused}"):
            make_configs("glyphs", "contrastive", (16,), {}, backbone=VIT, **given)


@pytest.mark.parametrize(
    "dataset, backbone, option",
    [
        ("glyphs", "small_cnn", "crop"),
        ("glyphs", VIT, "resize"),
        ("digits", VIT, "crop_mode"),
        ("emoji", VIT, "pad"),
    ],
)
def test_an_option_the_run_leaves_unused_is_refused(dataset, backbone, option):
    value = {"crop_mode": "aspect"}.get(option, 32)
    with pytest.raises(ValueError) as error:
        make_configs(dataset, "contrastive", (16,), {}, backbone=backbone, **{option: value})
    flag = "--" + option.replace("_", "-")
    assert str(error.value).startswith(f"{flag}: {dataset}'s inputs are used as they are")
    assert str(error.value).endswith(f"leave {flag} out")


def test_a_timm_backbone_takes_glyphs_at_the_crop_given():
    (cfg,) = make_configs("glyphs", "contrastive", (16,), {}, backbone=VIT, crop=32)
    assert cfg.crop == 32


def test_the_raw_inputs_baseline_is_one_whatever_crop_a_timm_run_takes():
    # A ViT at --crop 32 beside small_cnn runs on glyphs wrote a second raw-inputs baseline
    # (its id hashed the crop, which raw glyphs never see): one row, twice.
    (plain,) = make_configs("glyphs", "contrastive", (16,), {})
    (vit,) = make_configs("glyphs", "contrastive", (16,), {}, backbone=VIT, crop=32)
    raw = [baseline_config(c, 784, backbone="none", embedding="inputs") for c in (plain, vit)]
    assert raw[0].run_id() == raw[1].run_id()
    # the ids of runs at their defaults did not move (as every earlier glyphs run's)
    assert raw[0].run_id() == "glyphs-untrained-d784-s0-53517221"
    net = baseline_config(vit, 192, seed=0, backbone=VIT, embedding="backbone")
    assert net.crop == 32  # the untrained ViT is built for its crop: it keeps it
    (cub,) = make_configs("cub", "nngk", (16,), {}, crop=200)
    assert baseline_config(cub, 784).crop == 200  # images: their pipeline names the baseline


def test_row_labels_name_only_settings_that_changed_the_run(tmp_path):
    # The main job's small_cnn runs beside one ViT run at --crop 32: the small_cnn rows were
    # labelled 'resize 256, crop 224', settings glyphs never use.
    r = tmp_path / "r"
    for seed in (0, 1):
        make_run(r, f"cnn{seed}", loss="proxy-anchor", dataset="glyphs", seed=seed,
                 backbone="small_cnn", resize=256, crop=224)  # fmt: skip
    make_run(r, "vit", loss="proxy-anchor", dataset="glyphs", backbone=VIT, crop=32, resize=256)
    names = load_runs(r)[0].set_index("run")["name"]
    assert names["cnn0"] == "proxy-anchor, small_cnn"
    assert names["vit"] == f"proxy-anchor, {VIT}, crop 32"


def test_a_loss_parameter_left_out_splits_the_row_from_one_given(tmp_path):
    # pml:ArcFaceLoss with and without --regularizer were one row, two copies of one seed.
    r = tmp_path / "r"
    regularizer = "pml:RegularFaceRegularizer"
    for name, value in (("plain", None), ("regular", regularizer)):
        make_run(r, name, loss="pml:ArcFaceLoss", dataset="glyphs",
                 loss_params={"margin": 28.6, "regularizer": value})  # fmt: skip
    names = load_runs(r)[0].set_index("run")["name"]
    assert names["plain"] == "pml:ArcFaceLoss, no regularizer"
    assert names["regular"] == f"pml:ArcFaceLoss, regularizer={regularizer}"


@pytest.mark.parametrize("dims", [None, (64,)])
def test_a_preset_that_sets_nothing_for_the_data_set_names_no_table(dims, caplog):
    # --preset vit on glyphs is glyphs' own preset at 384 dims: its runs got the plain runs'
    # ids, yet named a table 'glyphs-vit' after whichever ran first.
    (vit,) = make_configs("glyphs", "contrastive", dims, {}, preset="vit")
    (plain,) = make_configs("glyphs", "contrastive", (vit.dims,), {})
    assert vit == plain and vit.preset == ""
    assert "--preset vit sets nothing on glyphs that its own preset does not" in caplog.text
    # a preset that does change the run keeps its name (proxy-anchor: GAP + GMP pooling)
    (anchor,) = make_configs("glyphs", "contrastive", dims, {}, preset="proxy-anchor")
    assert (anchor.preset, anchor.pooling) == ("proxy-anchor", "avg+max")
