"""The protocols as declarations (bench/protocols.py): nothing else compares a protocol's name,
what the harness reads from each protocol, and a protocol registered here, not in the harness,
that the trainer follows."""

import ast
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.data.splits import check_val_split, make_splits
from bench.evaluation.retrieval import MPREC_KS
from bench.protocols import (
    PROTOCOLS,
    Metric,
    data_protocol,
    get_protocol,
    protocol_columns,
    register_protocol,
    shown_protocol,
)
from bench.runs.config import RunConfig
from bench.train.compute import Compute
from bench.train.evaluations import EVALUATIONS, Evaluation, register_evaluation
from bench.train.presets import (
    CLASSIFY,
    INATURALIST,
    INSHOP,
    METRIC,
    PAIRS,
    REALITY_CHECK_SOP,
    make_configs,
    preset_for,
    sigma_for_dims,
)
from bench.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "bench" / "protocols.py"


def named_literals(node: ast.AST) -> list[str]:
    """The protocol names among a comparison operand's string literals (alone or in a tuple,
    list or set)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [n.value for n in items if isinstance(n, ast.Constant) and n.value in PROTOCOLS]


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of each ==, !=, in, not in or match case against a protocol's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            names = [n for side in (node.left, *node.comparators) for n in named_literals(side)]
        elif isinstance(node, ast.MatchValue):
            names = named_literals(node.value)
        else:
            continue
        found += [(node.lineno, name) for name in names]
    return found


def test_the_probe_finds_a_protocol_name_compared():
    code = 'a == "pairs"\nb in ("x", "classify")\nc != "other"\nmatch d:\n    case "metric": pass\n'
    assert sorted(name_comparisons(code)) == [(1, "pairs"), (2, "classify"), (5, "metric")]
    assert name_comparisons('f(protocol="pairs")\nx = {"metric": 1}\n') == []


def test_no_module_outside_the_registry_compares_a_protocol_name():
    modules = [p for top in ("bench", "losses", "miners") for p in (ROOT / top).rglob("*.py")]
    found = [
        f"{p.relative_to(ROOT)}:{line} {name}"
        for p in sorted(modules)
        if p != REGISTRY
        for line, name in name_comparisons(p.read_text())
    ]
    assert found == []


def test_run_takes_each_protocol_that_trains_and_refuses_the_others():
    for name, protocol in PROTOCOLS.items():
        out = CliRunner().invoke(main, ["run", "--protocol", name, "--dataset", "nowhere"])
        taken = "Invalid value for '--protocol'" not in out.output
        assert taken == protocol.trains and out.exit_code != 0, (name, out.output)
    with pytest.raises(ValueError, match="unknown protocol 'linear'; expected one of: metric, "):
        make_splits("linear", pd.DataFrame({"label": [0, 1], "split": ""}), 0.0)


def test_names_show_in_run_ids_and_tables_except_the_default_and_a_features_file():
    shown = ("metric", "file", "classify", "pairs", "linear", "query-gallery")
    assert [shown_protocol(n) for n in shown] == [False, False, True, True, True, True]
    assert shown_protocol("a later protocol")  # a report reads runs of any version
    assert RunConfig(protocol="metric").run_id().startswith("digits-nngk-")
    assert RunConfig(protocol="pairs").run_id().startswith("digits-pairs-nngk-")


@pytest.mark.parametrize(
    "record, split",
    [
        ({}, "metric"),
        ({"protocol": "classify"}, "classify"),
        ({"protocol": "linear", "data_protocol": "classify"}, "classify"),
        ({"protocol": "linear", "data_protocol": "file"}, "metric"),
        ({"protocol": "pairs", "data_protocol": "classify"}, "pairs"),  # only linear follows it
        ({"protocol": "old"}, "old"),
    ],
)
def test_the_split_a_run_follows(record, split):
    assert data_protocol(record) == split


def test_the_report_columns_keep_their_order_and_match_what_runs_record():
    seen_unseen = [f"{s}_{m}" for s in ("seen", "unseen") for m in ("accuracy", "far", "frr", "ap")]
    mprec = [f"mprec@{k}" for k in MPREC_KS]  # what a linear method's metrics.json keeps
    assert list(protocol_columns()) == ["accuracy", *mprec, *seen_unseen]


def test_what_each_protocol_declares_to_splits_presets_and_scores():
    with pytest.raises(
        ValueError,
        match="applies to the metric, query-gallery and cross-style protocols only .the classify",
    ):
        check_val_split("classes", "classify")
    check_val_split("classes:1/3", "metric")
    check_val_split("classes", "query-gallery")
    assert preset_for("metric", "cub") is METRIC and preset_for("pairs", "tinyimagenet") is PAIRS
    assert preset_for("metric", "sop") is REALITY_CHECK_SOP
    assert preset_for("metric", "inaturalist") is INATURALIST
    assert preset_for("query-gallery", "inshop") is INSHOP
    assert preset_for("classify", "cars196").config["val_fraction"] == 0.3
    assert preset_for("classify", "folder:x").config == CLASSIFY.config
    assert CLASSIFY.config["val_fraction"] == 0.2
    assert get_protocol("classify").score_of({"nll": 0.25, "map@r": 0.5}) == -0.25
    assert get_protocol("pairs").score_of({"pair_accuracy": 0.75, "map@r": 0.5}) == 0.75


@pytest.mark.parametrize(
    "dataset, protocol, expected",
    [
        (  # Musgrave et al. 2020, as far as a run expresses it
            "sop",
            "metric",
            dict(dims=128, backbone="bninception", freeze_bn=True, batch_size=32, m_per_class=4,
                 lr=1e-6, optimizer="rmsprop", weight_decay=1e-4, momentum=0.9, crop=227,
                 crop_mode="aspect", crop_scale="0.16,1", val_split="classes",
                 val_fraction=0.25),
        ),
        (  # Brown et al. 2020's code
            "inaturalist",
            "metric",
            dict(dims=512, backbone="resnet50", batch_size=384, m_per_class=4, lr=1e-5,
                 optimizer="adam", weight_decay=4e-4, epochs=90, crop=224, crop_mode="aspect"),
        ),
        (  # Kim et al. 2020's code (its In-Shop command: --bn-freeze 0)
            "inshop",
            "query-gallery",
            dict(dims=512, backbone="bninception", batch_size=180, lr=6e-4, optimizer="adamw",
                 weight_decay=1e-4, epochs=60, crop=224, val_split="classes", pooling="avg+max",
                 freeze_bn=False, warmup_epochs=1, schedule="step:20,40:0.25"),
        ),
    ],
)  # fmt: skip
def test_the_large_retrieval_sets_presets(dataset, protocol, expected):
    (cfg,) = make_configs(dataset, "contrastive", None, {}, protocol=protocol)
    assert {key: getattr(cfg, key) for key in expected} == expected
    assert cfg.pretrained == "imagenet" and cfg.resize == 256
    (nngk,) = make_configs(dataset, "nngk", None, {}, protocol=protocol)
    paper = {"sigma": sigma_for_dims(nngk.dims), "k": 100, "update_interval": 10}
    assert nngk.loss_params == paper  # the paper's NNGK for an ImageNet network


@pytest.fixture
def toy():
    """A protocol and an evaluation that only this test knows: the metric protocol's split,
    validation scored by R@1, and an evaluation that counts the items it is given."""

    @register_evaluation("count")
    class Count(Evaluation):
        def validate(self, run, emb, labels):
            return {"items": float(len(labels))}

    @register_protocol("toy")
    class Toy(Metric):
        score = "recall@1"
        evaluations = ("count",)

    yield Toy
    PROTOCOLS.pop("toy")
    EVALUATIONS.pop("count")


def test_a_protocol_registered_outside_the_harness_drives_the_trainer(toy, tmp_path):
    cfg = RunConfig(
        dataset="digits",
        protocol="toy",
        loss="contrastive",
        dims=8,
        epochs=2,
        batch_size=32,
        train_per_class=16,
    )
    trainer = Trainer(cfg, tmp_path / "run", Compute.resolve())
    metrics = trainer.fit(test=False)  # validation only, as a tuning trial: no test k-means
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert metrics["val_score"] == history["val_recall@1"].max() != history["val_map@r"].max()
    assert history["val_items"].tolist() == [len(trainer.data.val)] * 2
    assert sorted(set(trainer.data.test.labels)) == [5, 6, 7, 8, 9]  # the metric protocol's
    assert shown_protocol("toy") and trainer.name.startswith("digits-toy-contrastive-")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["protocol"] == "toy"
