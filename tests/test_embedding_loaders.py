"""A run embeds each split through one loader for the whole run (issue 44): the refresh and the
validation embed their splits every epoch, and a new loader's workers each time cost a short
epoch on a GPU much of its time."""

import numpy as np
import pytest
import torch

from bench.train import trainer as trainer_module
from bench.train.compute import Compute
from bench.train.presets import make_configs


def test_each_split_is_embedded_through_one_loader_for_the_run(tmp_path, monkeypatch):
    made = []
    real = trainer_module.embedding_loader

    def counted(split, device, workers):
        made.append(split)
        return real(split, device, workers)

    monkeypatch.setattr(trainer_module, "embedding_loader", counted)
    (cfg,) = make_configs(
        "glyphs:classes=10,instances=12",
        "nngk",
        (8,),
        {},
        epochs=2,
        val_fraction=0.2,
        batch_size=16,
        m_per_class=4,
    )
    trainer = trainer_module.Trainer(cfg, tmp_path / "run", Compute.resolve())
    metrics = trainer.fit()
    data = trainer.data
    # NNGK refreshes on train_eval, validation embeds val, each epoch; the test split
    # is embedded before training and after: each split's loader made once.
    assert [id(s) for s in made] == [id(data.test), id(data.train_eval), id(data.val)]
    assert metrics["best_epoch"] >= 1 and len(trainer.loaders) == 3


@pytest.mark.parametrize("items", [300, 8 * 256, 8 * 256 + 1])
def test_a_split_is_read_after_its_copies_to_the_host_are_done(monkeypatch, items):
    """`embed` copies each batch's embeddings to the host without waiting (on a GPU), and waits
    for the device once every COPIES_IN_FLIGHT batches, before it reads them: the same
    embeddings as the model gives the whole split at once."""
    from bench.models import embed as embed_module

    class Points(torch.utils.data.Dataset):
        labels = np.arange(items) % 7
        x = torch.randn(items, 6, generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return items

        def __getitem__(self, i):
            return self.x[i], int(self.labels[i]), i

    model = torch.nn.Linear(6, 5)
    waited = []
    monkeypatch.setattr(embed_module, "synchronize", waited.append)
    emb, labels = embed_module.embed(model, Points(), torch.device("cpu"))
    with torch.no_grad():
        whole = model(Points.x)
    batches = -(-items // embed_module.BATCH)
    assert len(waited) == -(-batches // embed_module.COPIES_IN_FLIGHT)
    assert torch.allclose(emb, whole, atol=1e-6) and np.array_equal(labels, Points.labels)
