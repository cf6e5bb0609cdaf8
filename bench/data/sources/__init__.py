"""Readers of each image data set's official on-disk layout, one file each.

A reader takes the data set's root folder and returns an image table (`pandas.DataFrame`) with
the columns of `base.COLUMNS`; it never downloads anything. Protocols pick their splits from it.
"""
