"""A run embeds each split through one loader for the whole run (issue 44): the refresh and the
validation embed their splits every epoch, and a new loader's workers each time cost a short
epoch on a GPU much of its time."""

from bench.train import trainer as trainer_module
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
    trainer = trainer_module.Trainer(cfg, tmp_path / "run")
    metrics = trainer.fit()
    data = trainer.data
    # NNGK refreshes on train_eval, validation embeds val, each epoch; the test split
    # is embedded before training and after: each split's loader made once.
    assert [id(s) for s in made] == [id(data.test), id(data.train_eval), id(data.val)]
    assert metrics["best_epoch"] >= 1 and len(trainer.loaders) == 3
