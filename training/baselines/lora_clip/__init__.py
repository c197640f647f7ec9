"""LoRA-CLIP with hard literal negatives (seed 004, "Semantic Contrastive Adaptation").

- `losses`  L_dev (Eq. 7), a pure function of tensors
- `metrics` IRFL accuracy (Precision@1), similarity margin and literal-bias rate (Sec. 6.2)
- `mining`  hard literal negatives scored by the frozen base model, as training triples
- `model`   open_clip with its projections as Linear layers, PEFT LoRA on the named layers
- `config`  LoraClipConfig (YAML in training/configs/lora-clip-*.yaml)
- `train`   the training run on IRFL's train split: mine, train, save the adapter
"""
