"""The run store: a run's configuration (its identity) and its folder of atomically written files.
"""
