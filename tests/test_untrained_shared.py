"""The untrained network's test metrics, which every fresh run records, are computed once for
the runs of one process that start from the same network (the main job's 4 losses of a seed),
and are the same to the bit as each run's own evaluation."""

from __future__ import annotations

import bench.models.embed as embed_module
import bench.train.trainer as trainer_module
from bench.train.compute import Compute
from bench.train.presets import make_configs
from bench.train.run_evaluation import searched_test
from bench.train.untrained import CACHE, UntrainedCache, network_key, untrained_metrics

DATA = "glyphs:classes=10,instances=12"


def trainer(tmp_path, loss: str, seed: int = 0) -> trainer_module.Trainer:
    (cfg,) = make_configs(
        DATA, loss, (8,), {}, epochs=1, val_fraction=0.2, batch_size=16, m_per_class=4, seed=seed
    )
    return trainer_module.Trainer(cfg, tmp_path / cfg.run_id(), Compute.resolve("cpu"))


def test_runs_of_one_network_embed_the_test_split_once(tmp_path, monkeypatch):
    embedded = []
    real = embed_module.embed

    def counted(model, dataset, *args, **kwargs):
        embedded.append(dataset)
        return real(model, dataset, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "embed", counted)
    monkeypatch.setattr(embed_module, "embed", counted)
    CACHE.clear()  # nothing kept from another test
    # nngk's embeddings are not normalised, contrastive's and triplet's are: one network
    runs = [trainer(tmp_path, loss) for loss in ("nngk", "contrastive", "triplet")]
    starts = [run.start_or_resume()["untrained_network"] for run in runs]
    assert len([split for split in embedded if any(split is r.data.test for r in runs)]) == 1
    for run, start in zip(runs, starts, strict=True):
        assert start == searched_test(run, clustering="none")[0]  # each run's own, to the bit
    assert starts[1] == starts[2] and starts[0] != starts[1]


def test_another_seed_or_setting_is_another_network(tmp_path):
    first, second = trainer(tmp_path, "contrastive", 0), trainer(tmp_path, "contrastive", 1)
    assert network_key(first) != network_key(second)
    same = trainer(tmp_path, "triplet", 0)
    assert network_key(first) == network_key(same)
    same.cfg = same.cfg.__class__(**{**same.cfg.to_dict(), "pooling": "max"})
    assert network_key(first) != network_key(same)  # no weights of its own, yet another output


def test_the_cache_keeps_a_few_networks(tmp_path):
    cache = UntrainedCache(kept=1)
    runs = [trainer(tmp_path, "contrastive", seed) for seed in (0, 1)]
    for run in runs:
        untrained_metrics(run, cache)
    assert list(cache.embeddings) == [network_key(runs[1])]
    assert all(key == network_key(runs[1]) for key, _ in cache.metrics)
