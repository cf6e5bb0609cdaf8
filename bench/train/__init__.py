"""Training: presets as plain data, the shared trainer, its loaders, baselines and feature
extraction.
"""
