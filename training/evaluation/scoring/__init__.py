"""Score matrices: the lens-masked similarity of the lens model, its ablation variants, zero-shot systems."""
