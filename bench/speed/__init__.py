"""Benchmarks that print speed ratios (`nngk-bench speed`)."""
