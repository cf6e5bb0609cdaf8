"""Evaluation: retrieval metrics, clustering, pair verification and classification scoring."""
