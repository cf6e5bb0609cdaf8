"""The command line's options, each declared once: the run settings from RunConfig's fields,
--loss-param and its short spellings, --seed in every command, `run --config`; and the run ids
of the commands' runs pinned, so that a change of the command line renames no run. In process,
nothing trained: `run_all` records the runs a command would train."""

import json
import os
import re
from dataclasses import fields, replace

import click
import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.cli.params import name_values, parsed
from bench.cli.run import run
from bench.cli.settings import CheckedText, run_settings
from bench.cli.suite import suite
from bench.cli.tune import tune
from bench.runs.config import RunConfig
from bench.train.loaders import with_data_identity
from bench.train.presets import make_configs
from tests.fixtures.folder import make_folder


@pytest.fixture
def planned(monkeypatch):
    """The configs a command would train (none is trained, no data set read: an official one
    need not be on this machine)."""
    configs = []
    monkeypatch.setattr("bench.cli.training.run_all", lambda found, *_: configs.extend(found))
    monkeypatch.setattr("bench.data.presence.check_data_present", lambda *_: None)
    return configs


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def plan(planned, *args) -> list[RunConfig]:
    planned.clear()
    out = invoke(*args)
    assert out.exit_code == 0, out.output
    return list(planned)


def one_line_error(out, message: str) -> None:
    lines = out.output.strip().splitlines()
    assert out.exit_code != 0 and len(lines) == 1 and message in lines[0], out.output


# The run ids of each command line, computed before the options were built from RunConfig's
# fields (issue 23): they must never change.
PINNED = {
    "run --dataset glyphs --dims 64": "glyphs-nngk-d64-s0-f6313792",
    "run --dataset digits --loss triplet --miner all --dims 8 --seed 1": (
        "digits-triplet-all-d8-s1-4e66e44e"
    ),
    "run --dataset cub --protocol classify --loss nngk": "cub-classify-nngk-d4096-s0-9cbc48b3",
    "run --dataset digits --loss nngk --sigma 2 --k 50 --update-interval 3 --fixed-weights "
    "--dims 16": "digits-nngk-d16-s0-25f2e2aa",
    "run --dataset digits --loss nngk --index exact --nprobe 4 --dims 16": (
        "digits-nngk-d16-s0-a95c3564"
    ),
    "run --dataset digits --loss triplet --margin 0.1 --miner easy-positive --dims 8": (
        "digits-triplet-easy-positive-d8-s0-e8931f6c"
    ),
    "run --dataset digits --loss triplet --triplet-form nca --miner all --dims 8": (
        "digits-triplet-nca-all-d8-s0-65ea57a5"
    ),
    "run --dataset glyphs --preset liu2019 --loss npair --embedding gap": (
        "glyphs-npair-d64-s0-91bbe57e"
    ),
    "run --dataset glyphs --preset seed003 --loss npair --embedding gap": (
        "glyphs-npair-d64-s0-91bbe57e"
    ),
    "run --dataset digits --epochs 3 --batch-size 32 --m-per-class 8 --lr 0.1 --weight-decay 0 "
    "--train-per-class 5 --val-split classes --val-fraction 0.3 --freeze-backbone --workers 2 "
    "--dims 8": "digits-nngk-d8-s0-e260cb48",
    "run --dataset cars196 --backbone resnet18 --pretrained none --resize 128 --crop 112 "
    "--crop-mode aspect --dims 32": "cars196-nngk-d32-s0-e7283e0b",
}
SUITE_DIGITS = [
    "digits-contrastive-d8-s0-26aa6135",
    "digits-lifted-d8-s0-39d89645",
    "digits-nca-d8-s0-d1e80fa2",
    "digits-nngk-d8-s0-fa9d7bd5",
    "digits-npair-d8-s0-ec327290",
    "digits-softmax-d8-s0-de4b116d",
    "digits-triplet-all-d8-s0-3f6fe761",
    "digits-triplet-easy-positive-d8-s0-09b01bfd",
    "digits-triplet-semihard-d8-s0-923d0147",
]


@pytest.mark.parametrize("command", sorted(PINNED))
def test_the_run_ids_of_a_command_line_never_change(planned, command):
    assert [c.run_id() for c in plan(planned, *command.split())] == [PINNED[command]]


def test_the_run_ids_of_the_suite_never_change(planned):
    configs = plan(planned, *"suite --dataset digits --dims 8 --seed 0".split())
    assert sorted(c.run_id() for c in configs) == SUITE_DIGITS


def test_every_run_setting_is_an_option_of_run_with_its_fields_help_and_type():
    options = {p.name: p for p in run.params}
    hidden = {f.name for f in fields(RunConfig)} - set(run_settings())
    assert hidden == {
        "dataset", "loss", "loss_params", "dims", "seed", "data_location", "data_fingerprint",
        "tuned",
    }  # fmt: skip
    for name, setting in run_settings().items():
        option = options[name]
        assert option.opts == ["--" + name.replace("_", "-")]
        assert option.help.startswith(setting.metadata["help"])
        kind = {int: click.INT, float: click.FLOAT, str: click.STRING}
        if isinstance(setting.default, bool):
            assert option.is_flag
        elif not isinstance(option.type, (click.Choice, click.IntRange, click.FloatRange)):
            if name in ("schedule", "crop_scale", "val_split"):  # text in a form of its own
                assert isinstance(option.type, CheckedText)
                continue
            assert option.type == kind[type(setting.default)], name
    assert not {"data_location", "tuned", "loss_params"} & set(options)
    assert options["crop_mode"].type.choices == ("squash", "aspect")
    assert "One of small_cnn, small_cnn_gn" in options["backbone"].help


def test_an_option_not_given_leaves_the_setting_to_the_preset(planned):
    (nngk,) = plan(planned, "run", "--dataset", "digits", "--dims", "8")
    assert (nngk.lr, nngk.epochs, nngk.m_per_class, nngk.loss_params["sigma"]) == (1e-3, 10, 16, 1)
    (npair,) = plan(planned, "run", "--dataset", "glyphs", "--loss", "npair", "--dims", "8")
    assert (npair.m_per_class, npair.lr) == (2, 1e-3)  # the loss's batch, the preset's lr
    (given,) = plan(planned, "run", "--dataset", "digits", "--dims", "8", "--momentum", "0.5")
    assert given.momentum == 0.5 and given.lr == 1e-3  # a field added: its option


@pytest.mark.parametrize(
    "name, text, default, value",
    [
        ("sigma", "1", 10.0, 1.0),
        ("k", "50", 100, 50),
        ("learn_weights", "false", True, False),
        ("learn_weights", "1", True, True),
        ("learn_weights", "TRUE", True, True),
        ("index", "exact", "auto", "exact"),
        ("triplets_per_anchor", "5", "all", 5),  # a text default takes a number (PML's)
        ("triplets_per_anchor", "all", "all", "all"),
    ],
)
def test_a_loss_parameter_is_read_as_its_defaults_type(name, text, default, value):
    assert parsed(name, text, default) == value
    assert type(parsed(name, text, default)) is type(value)


@pytest.mark.parametrize(
    "text, default, message",
    [
        ("x", 1.0, "bad --loss-param p=x; expected a finite number"),
        ("1.5", 100, "bad --loss-param p=1.5; expected an integer"),
        ("yes", True, "bad --loss-param p=yes; expected true or false"),
    ],
)
def test_a_loss_parameter_of_the_wrong_type_is_refused(text, default, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parsed("p", text, default)


def test_a_pml_losss_whole_number_default_takes_a_fraction_and_keeps_a_whole_number():
    # Before: pml:ContrastiveLoss neg_margin=0.5 was refused (its default is 1), with no way
    # to give it; a whole number stays an int, so the run ids of whole numbers are unchanged.
    assert parsed("neg_margin", "0.5", 1, loose=True) == 0.5
    assert type(parsed("neg_margin", "2", 1, loose=True)) is int
    with pytest.raises(ValueError, match="expected an integer"):
        parsed("margin", "2.5", 4)  # our own losses' integers stay integers


def test_loss_param_pairs():
    assert name_values(("sigma=1", "update-interval=3", "sigma=1")) == {
        "sigma": "1", "update_interval": "3"
    }  # fmt: skip
    for bad, message in [("sigma", "expected NAME=VALUE"), ("=1", "expected NAME=VALUE")]:
        with pytest.raises(ValueError, match=message):
            name_values((bad,))
    with pytest.raises(ValueError, match="--loss-param k is given twice: 1 and 2"):
        name_values(("k=1", "k=2"))


def test_loss_param_and_its_short_spellings_give_the_same_run(planned):
    short = "--sigma 2 --k 50 --update-interval 3 --fixed-weights"
    long = "--loss-param sigma=2 --loss-param k=50 --loss-param update_interval=3 "
    long += "--loss-param learn_weights=false"
    base = ["run", "--dataset", "digits", "--dims", "16"]
    (by_short,) = plan(planned, *base, *short.split())
    (by_long,) = plan(planned, *base, *long.split())
    assert by_long == by_short and by_long.run_id() == "digits-nngk-d16-s0-25f2e2aa"
    (both,) = plan(planned, *base, "--sigma", "2", "--loss-param", "sigma=2.0")
    assert both.loss_params["sigma"] == 2.0
    args = ["--dataset", "digits", "--loss", "triplet", "--loss-param", "miner=all", "--dims", "8"]
    (triplet,) = plan(planned, "run", *args, "--loss-param", "margin=0.1")
    assert triplet.loss_params == {"miner": "all", "margin": 0.1}


@pytest.mark.parametrize(
    "args, message",
    [
        (
            "--loss triplet --loss-param sigma=1",
            "loss 'triplet' does not take --loss-param sigma; it takes: margin=0.2, miner=semihard",
        ),
        ("--loss softmax --sigma 3", "loss 'softmax' does not take --sigma; it takes: no param"),
        ("--loss nngk --loss-param k=many", "bad --loss-param k=many; expected an integer"),
        ("--loss triplet --loss-param miner=hardest", "unknown miner 'hardest'; expected one of"),
        ("--loss nngk --loss-param sigma=0", "NNGK needs sigma > 0"),
        # Before: accepted by --loss-param, refused by --margin (every step's loss 0).
        ("--loss triplet --loss-param margin=-1", "bad --loss-param margin=-1: -1.0 is not in"),
        # Before: PML rounded 2.5 down to 2 and the run recorded 2.5; 0.5 failed mid-step.
        ("--loss sphereface --margin 2.5", "margin is a whole multiple of the angle"),
        ("--loss large-margin-softmax --loss-param margin=0", "a whole multiple of the angle"),
        ("--loss nngk --loss-param index=annoy", "NNGK index is one of"),
        ("--loss nngk --loss-param sigma", "bad --loss-param 'sigma'; expected NAME=VALUE"),
        (
            "--loss nngk --sigma 2 --loss-param sigma=3",
            "--sigma 2.0 and --loss-param sigma=3 disagree; give one of them",
        ),
        (
            "--loss nngk --fixed-weights --loss-param learn_weights=true",
            "--fixed-weights False and --loss-param learn_weights=true disagree",
        ),
    ],
)
def test_a_bad_loss_parameter_is_a_one_line_error_and_writes_nothing(args, message, tmp_path):
    out = invoke("run", *args.split(), "--dataset", "digits", "--results", tmp_path)
    one_line_error(out, message)
    assert not any(tmp_path.iterdir())


def test_the_suite_gives_a_loss_parameter_to_every_loss_that_takes_it(planned):
    base = ["suite", "--dataset", "digits", "--dims", "8", "--seed", "0"]
    configs = plan(planned, *base, "--loss-param", "margin=0.1", "--loss-param", "sigma=2")
    margins = {c.loss_params.get("miner"): c.loss_params["margin"] for c in configs
               if c.loss == "triplet"}  # fmt: skip
    assert margins == {"semihard": 0.1, "easy-positive": 0.1, "all": 0.1}
    assert [c.loss_params["sigma"] for c in configs if c.loss == "nngk"] == [2.0]
    others = [c for c in configs if c.loss not in ("triplet", "nngk")]
    assert len(others) == 5 and not any("margin" in c.loss_params for c in others)
    one_line_error(invoke(*base, "--loss-param", "temperature=1"), "no loss of nngk, softmax")
    one_line_error(invoke(*base, "--loss-param", "miner=all"), "the set of losses sets it itself")


def test_seed_is_one_option_in_every_command_with_the_old_spelling_kept():
    for command, default in ((run, "0"), (suite, "0,1,2"), (tune, "0,1,2")):
        (seed,) = [p for p in command.params if "--seed" in p.opts]
        assert seed.opts == ["--seed", "--seeds"] and seed.default == default


def test_tune_takes_seed_and_loss_param_and_refuses_a_parameter_no_loss_takes(tmp_path):
    args = ["tune", "--loss", "contrastive,nngk", "--dataset", "digits", "--results", tmp_path]
    one_line_error(invoke(*args, "--seed", "-1"), "bad --seed '-1'; expected comma-separated")
    one_line_error(invoke(*args, "--seeds", "x"), "bad --seed 'x'")
    one_line_error(invoke(*args, "--loss-param", "margin=1"), "no loss of contrastive, nngk takes ")
    assert not any(tmp_path.iterdir())


@pytest.fixture
def tune_setups(monkeypatch) -> list:
    """The TuneSetup each `tune` command hands on, which then stops with "stopped here"."""
    import bench.tune.study

    setups = []

    def tune_loss(setup, *_):
        setups.append(setup)
        raise ValueError("stopped here")

    monkeypatch.setattr(bench.tune.study, "tune_loss", tune_loss)
    return setups


def test_tune_holds_a_loss_parameter_fixed_for_the_losses_that_take_it(tmp_path, tune_setups):
    setups = tune_setups
    args = ["tune", "--loss", "contrastive,triplet", "--dataset", "digits", "--results", tmp_path]
    one_line_error(invoke(*args, "--loss-param", "miner=all"), "stopped here")
    assert setups[0].fixed == {"triplet": {"miner": "all"}}


def test_a_tuned_loss_parameter_is_held_fixed_and_names_its_study():
    from bench.tune.study import TuneSetup, trial_configs

    # An unpruned search keeps the names studies had before pruning; a pruned one says so.
    plain = TuneSetup("digits", 8, 2, 1, pruner="none")
    assert plain.study_name("nngk") == "digits-nngk-d8-t2-e1-f1-s0"
    assert TuneSetup("digits", 8, 2, 1).study_name("nngk") == "digits-nngk-d8-t2-e1-f1-s0-hyperband"
    budget = TuneSetup("digits", 8, 2, 1, pruner="halving", epoch_budget=30)
    assert budget.study_name("nngk") == "digits-nngk-d8-t2-e1-f1-s0-halving-b30"
    # A budget names an unpruned study too: studies of 5 and of 3 epochs were one (issue:
    # the second read the first's trials).
    unpruned_budget = TuneSetup("digits", 8, 2, 1, pruner="none", epoch_budget=30)
    assert unpruned_budget.study_name("nngk") == "digits-nngk-d8-t2-e1-f1-s0-b30"
    # A name too long for a folder is cut, its data set's part hashed (the search ran, then
    # every write failed "File name too long").
    long = TuneSetup(f"folder:/{'a' * 150}/{'b' * 120}", 8, 2, 1, data="0123abcd")
    name = long.study_name("nngk")
    assert len(name) <= 200 and name.endswith("-nngk-d8-t2-e1-f1-s0-hyperband-data-0123abcd")
    fixed = TuneSetup("digits", 8, 2, 1, fixed={"nngk": {"k": 50}}, pruner="none")
    assert fixed.study_name("nngk") == "digits-nngk-d8-t2-e1-f1-s0-k-50"
    assert fixed.study_name("contrastive") == "digits-contrastive-d8-t2-e1-f1-s0"
    assert set(fixed.space("nngk")) == {"lr", "weight_decay", "sigma"}  # k no longer searched
    (cfg,) = trial_configs(fixed, "nngk", {"lr": 0.01, "weight_decay": 1e-4, "sigma": 3.0})
    assert cfg.loss_params == {"sigma": 3.0, "k": 50, "update_interval": 1}


def test_tune_holds_optimizer_and_memory_for_every_run_and_names_the_study(tmp_path, tune_setups):
    from bench.tune.study import TuneSetup, trial_configs

    setups = tune_setups
    args = ["tune", "--loss", "contrastive", "--dataset", "digits", "--results", tmp_path]
    one_line_error(invoke(*args, "--optimizer", "sgd"), "stopped here")  # the default: no name
    assert setups[-1].settings == {}
    one_line_error(invoke(*args, "--optimizer", "rmsprop", "--memory", "256"), "stopped here")
    held = setups[-1]
    assert held.settings == {"optimizer": "rmsprop", "memory": 256}
    assert (held.epochs, held.pruner) == (10, "hyperband")  # the digits preset's epochs
    assert held.study_name("contrastive") == (
        "digits-contrastive-d64-t8-e10-f1-s0-hyperband-memory-256-optimizer-rmsprop"
    )
    (cfg,) = trial_configs(held, "contrastive", {"lr": 0.01, "weight_decay": 1e-4})
    assert (cfg.optimizer, cfg.memory, cfg.lr) == ("rmsprop", 256, 0.01)
    unpruned = TuneSetup("digits", 64, epochs=3, pruner="none")
    assert unpruned.study_name("contrastive") == "digits-contrastive-d64-t8-e3-f1-s0"
    nngk = ["tune", "--loss", "nngk", "--dataset", "digits", "--memory", "64"]
    one_line_error(invoke(*nngk, "--results", tmp_path), "the loss 'nngk' takes no cross-batch")


def write_record(folder, cfg: RunConfig) -> None:
    """A config.json as the trainer writes it (bench/train/run_record.py, config_record)."""
    record = {**cfg.to_dict(), "run_id": cfg.run_id(), "resolved_loss_params": {}, "device": ""}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**record, "versions": {"torch": "x"}}))


def test_run_config_reruns_a_run_under_its_id(planned, tmp_path):
    data = make_folder(tmp_path, classes=4, per_class=6)
    (cfg,) = make_configs(f"folder:{data}", "nngk", (8,), {"k": 5}, backbone="small_cnn",
                          pretrained="none", resize=32, crop=28, workers=1)  # fmt: skip
    (cfg,) = with_data_identity([replace(cfg, tuned="a-study", preset="tuned")])
    assert cfg.data_fingerprint
    write_record(tmp_path / "run", cfg)
    (again,) = plan(planned, "run", "--config", tmp_path / "run" / "config.json")
    assert again == cfg and again.run_id() == cfg.run_id()
    (logged,) = plan(planned, "run", "--config", tmp_path / "run", "--log", "none", "--workers", 0)
    assert logged.workers == 0 and logged.run_id() == cfg.run_id()
    one_line_error(
        invoke("run", "--config", tmp_path / "run", "--epochs", "3"),
        "--config reruns the run as it recorded itself; --epochs would change it",
    )
    one_line_error(invoke("run", "--config", tmp_path / "run", "--loss", "nngk"), "--loss would")
    image = next(data.glob("*/*.jpg"))
    os.utime(image, (1, 1))  # the data changed since: no longer the same run
    one_line_error(invoke("run", "--config", tmp_path / "run"), "its data changed or moved since")


def test_a_rerun_of_a_relative_folder_from_elsewhere_says_where_it_was_read(
    planned, tmp_path, monkeypatch
):
    # Before: "folder: .../images not found" (or: its data moved), without a word of where.
    make_folder(tmp_path / "a", classes=4, per_class=6)
    monkeypatch.chdir(tmp_path / "a")
    (cfg,) = make_configs("folder:images", "nngk", (8,), {}, backbone="small_cnn",
                          pretrained="none", resize=32, crop=28)  # fmt: skip
    (cfg,) = with_data_identity([cfg])
    write_record(tmp_path / "run", cfg)
    monkeypatch.chdir(tmp_path)  # another working folder: no images/ here
    one_line_error(
        invoke("run", "--config", tmp_path / "run"),
        f"(the run read {tmp_path / 'a' / 'images'}: run --config from the folder it was "
        "started in)",
    )


def test_run_config_refuses_what_is_not_a_runs_record(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    one_line_error(invoke("run", "--config", tmp_path / "bad.json"), "not a run's config.json")
    one_line_error(invoke("run", "--config", tmp_path / "none.json"), "does not exist")
    (tmp_path / "linear.json").write_text(json.dumps({"loss": "nml", "protocol": "linear"}))
    one_line_error(invoke("run", "--config", tmp_path / "linear.json"), "`nngk-bench linear`")


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--lr", "nan"],
        ["run", "--momentum", "nan"],
        ["run", "--weight-decay", "inf"],
        ["run", "--val-fraction", "nan"],
        ["run", "--sigma", "nan"],
        ["run", "--margin", "nan"],
        ["suite", "--lr", "nan"],
        ["pretrain", "--lr", "nan"],
        ["check", "--tolerance", "nan"],
    ],
)
def test_a_setting_of_nan_or_infinity_is_refused_in_one_line(args):
    # Issue 43: a NaN passes every bound, and was written into config.json (not JSON) or
    # into weights; --sigma nan and --margin nan ended in a KeyError traceback.
    out = invoke(*args)
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 2 and "is not a finite number" in line, out.output


def test_a_loss_parameter_of_nan_is_refused_in_one_line():
    one_line_error(invoke("run", "--loss-param", "sigma=nan"), "sigma=nan; expected a finite")


def test_a_study_of_data_that_changed_is_another_study(tmp_path, tune_setups):
    # Before: the study of the file as it was went on, its settings retrained on the new data.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(12), 10)
    path = tmp_path / "f.npz"
    args = ["tune", "--loss", "contrastive", "--dims", "8", "--batch-size", "16",
            "--m-per-class", "4", "--results", tmp_path]  # fmt: skip
    names = []
    for shift in (0.0, 1.0):
        features = rng.normal(size=(120, 4)).astype(np.float32) + shift
        np.savez(
            path, features=features, labels=labels, split=np.where(labels < 6, "train", "test")
        )
        one_line_error(invoke(*args, "--dataset", f"features:{path}"), "stopped here")
        names.append(tune_setups[-1].study_name("contrastive"))
    assert names[0] != names[1] and all(re.search(r"-data-[0-9a-f]{8}$", n) for n in names)
    one_line_error(invoke(*args, "--dataset", "digits"), "stopped here")
    assert tune_setups[-1].data == ""  # the built-in sets: the names they had
