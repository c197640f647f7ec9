"""Ablation training configs (YAML); a package so the wheel ships them."""
