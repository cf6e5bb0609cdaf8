"""Utilities below every part of the harness: atomic writes, kNN search, registries, seeds and
devices, names.
"""
