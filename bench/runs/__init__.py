"""The run store: a run's configuration (its identity) and its atomically written files."""
