"""Data: the official layouts' readers (sources/), the image cache, protocol splits, feature files,
data sets.
"""
