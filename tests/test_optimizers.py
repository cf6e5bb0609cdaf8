"""`--optimizer` and the loss's own parameter group: each optimizer is torch's with the run's
settings, a loss's parameters (proxies, class weights) get their declared multiple of the
learning rate (read back from the optimizer the trainer built), and the choice is in the run's
id, config.json, metrics.json and the report's setup line, while earlier runs keep their ids."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from bench.runs.config import RunConfig
from bench.train.optimizers import make_optimizer, optimizer_text
from bench.train.presets import make_configs
from losses.base import BenchLoss
from losses.registry import LOSSES
from tests.conftest import FAST, cli


class ProxyLoss(BenchLoss):
    """A loss with proxies of its own, trained at 100x the network's learning rate."""

    lr_multiplier = 100.0

    def __init__(self, num_classes: int, dims: int):
        super().__init__()
        self.proxies = nn.Parameter(torch.randn(num_classes, dims))

    def forward(self, embeddings, labels, indices=None):
        return torch.cdist(embeddings, self.proxies)[torch.arange(len(labels)), labels].mean()


@pytest.mark.parametrize(
    "name, cls, momentum",
    [
        ("sgd", torch.optim.SGD, 0.9),
        ("rmsprop", torch.optim.RMSprop, 0.9),
        ("adam", torch.optim.Adam, None),
        ("adamw", torch.optim.AdamW, None),
    ],
)
def test_each_optimizer_is_torchs_with_the_runs_settings(name, cls, momentum):
    cfg = RunConfig(optimizer=name, lr=0.003, weight_decay=1e-4, momentum=0.9)
    optimizer = make_optimizer(cfg, nn.Linear(3, 2), ProxyLoss(4, 2))
    assert type(optimizer) is cls
    first, second = optimizer.param_groups
    assert (first["lr"], first["weight_decay"]) == (0.003, 1e-4)
    assert second["lr"] == pytest.approx(0.3) and second["weight_decay"] == 1e-4
    assert first.get("momentum") == momentum


def test_a_loss_at_the_networks_rate_keeps_one_group_as_earlier_checkpoints_have():
    loss = ProxyLoss(4, 2)
    loss.lr_multiplier = 1.0
    optimizer = make_optimizer(RunConfig(), nn.Linear(3, 2), loss)
    (group,) = optimizer.param_groups
    assert len(group["params"]) == 3  # the network's weight and bias, the proxies


def test_the_trainer_gives_the_losss_parameters_their_multiple(tmp_path, monkeypatch):
    from bench.train.compute import Compute
    from bench.train.trainer import Trainer

    monkeypatch.setitem(LOSSES, "proxy-toy", ProxyLoss)
    (cfg,) = make_configs("digits", "proxy-toy", (8,), {}, lr=0.002, optimizer="adamw")
    trainer = Trainer(cfg, tmp_path / "run", Compute.resolve())
    network, own = trainer.optimizer.param_groups
    assert network["lr"] == 0.002 and own["lr"] == pytest.approx(0.2)
    assert own["params"] == [trainer.loss.proxies]
    assert {id(p) for p in network["params"]} == {id(p) for p in trainer.model.parameters()}
    assert trainer.optimizer_text() == (
        "AdamW (weight decay 0.0005; the loss's parameters at 100x the lr)"
    )


def test_the_optimizer_names_the_run_and_sgd_keeps_earlier_ids():
    (default,) = make_configs("digits", "nngk", (8,), {})
    (sgd,) = make_configs("digits", "nngk", (8,), {}, optimizer="sgd")
    (adamw,) = make_configs("digits", "nngk", (8,), {}, optimizer="adamw")
    assert default.run_id() == sgd.run_id() == "digits-nngk-d8-s0-fa9d7bd5"  # as before
    assert adamw.run_id() != sgd.run_id()


def test_the_optimizer_is_recorded_and_stated_in_the_setup_line(tmp_path):
    out = cli("run", "--loss", "contrastive", *FAST, "--optimizer", "adam", "--lr", "0.001",
              "--results", tmp_path / "r")  # fmt: skip
    assert out.exit_code == 0, out.output
    (run,) = (tmp_path / "r").glob("digits-contrastive-*")
    assert json.loads((run / "config.json").read_text())["optimizer"] == "adam"
    assert json.loads((run / "metrics.json").read_text())["optimizer"] == (
        "Adam (weight decay 0.0005)"
    )
    assert cli("report", "--results", tmp_path / "r", "--out", tmp_path / "out").exit_code == 0
    assert "optimizer Adam (weight decay 0.0005)" in (tmp_path / "out" / "digits.md").read_text()


def test_sgd_is_stated_as_before():
    assert optimizer_text(RunConfig()) == "SGD (momentum 0.9, weight decay 0.0005)"


def test_an_unknown_optimizer_is_a_one_line_error(tmp_path):
    out = cli("run", *FAST, "--optimizer", "lbfgs", "--results", tmp_path, catch_exceptions=True)
    assert out.exit_code == 2 and "'lbfgs' is not one of 'sgd', 'adam', 'adamw', 'rmsprop'" in (
        out.output
    )
