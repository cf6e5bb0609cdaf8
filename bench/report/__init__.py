"""Reports read from run folders: tables, figures, the t-SNE views, the regression check, papers'
numbers.
"""
