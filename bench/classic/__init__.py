"""Sharma et al. 2015's classic methods on feature vectors: NML, linear metric learning, PCA, NCA,
LMNN."""
