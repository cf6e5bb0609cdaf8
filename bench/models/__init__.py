"""Models: backbones (small CNNs, torchvision's), embedding heads, embedding a split."""
