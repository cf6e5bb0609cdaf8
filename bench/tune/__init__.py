"""`tune`: equal-budget hyper-parameter search per loss (Optuna), then retraining."""
