"""Models: backbones (small CNNs, torchvision's) with their embedding heads, and embedding a split.
"""
