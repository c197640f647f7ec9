"""The systems that need models loaded to score a split: the paper's lens model, variants and global-only row, and the swapped-split harnesses."""
