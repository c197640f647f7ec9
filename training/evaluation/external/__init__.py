"""Evaluation on external sets: Karpathy COCO/Flickr30K, ArtEmis, IRFL detection and its fusion systems."""
