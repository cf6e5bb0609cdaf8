"""The check that a run's data is there, made before torch is imported (bench/data/presence.py),
knows what the data sets' module knows."""

import importlib

from bench.data import datasets, presence


def test_the_readers_are_the_data_sets_modules():
    found = {}
    for name, target in presence.READER_FUNCTIONS.items():
        module, function = target.split(":")
        found[name] = getattr(importlib.import_module(module), function)
    assert found == datasets.READERS
