"""open_clip CLIP with PEFT LoRA on the layers seed 004 names (attention and projection, blocks 9-11).

open_clip keeps both projections as bare nn.Parameter matrices (`visual.proj`,
`text_projection`), which PEFT cannot wrap, and attention as nn.MultiheadAttention (PEFT's
MultiheadAttention LoRA adapts its fused q/k/v in_proj and its out_proj). `ProjectedClip` moves
the two projections into nn.Linear modules with the same weights, so the embeddings are those
of the unmodified model, and LoRA targets, by full-match regex on module names:

    vision_attention   clip.visual.transformer.resblocks.{i}.attn
    text_attention     clip.transformer.resblocks.{i}.attn
    vision_projection  visual_projection
    text_projection    text_projection
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from training.baselines.lora_clip.config import CONFIG_DIR, ClipSection, LoraSection
from training.baselines.open_clip import load_open_clip

ADAPTER_FILE = "adapter.pt"
ADAPTER_CONFIG_FILE = "adapter.json"
BASE_FILE = "base.pt"  # only for random-weight bases (tests): nothing else could rebuild them
_ATTENTION_PREFIX = {"vision_attention": r"clip\.visual\.transformer", "text_attention": r"clip\.transformer"}


def _linear_from(weight: torch.Tensor) -> nn.Linear:
    """nn.Linear computing x @ weight (weight [in, out], as open_clip stores projections)."""
    linear = nn.Linear(weight.shape[0], weight.shape[1], bias=False)
    linear.weight.data.copy_(weight.detach().T)
    return linear


class ProjectedClip(nn.Module):
    """An open_clip CLIP whose image and text projections are nn.Linear; unit-norm embeddings out."""

    def __init__(self, clip: nn.Module):
        super().__init__()
        if not isinstance(getattr(clip.visual, "proj", None), nn.Parameter):
            raise TypeError("ProjectedClip needs an open_clip ViT with a `visual.proj` matrix")
        self.visual_projection = _linear_from(clip.visual.proj)
        self.text_projection = _linear_from(clip.text_projection)
        clip.visual.proj = None  # open_clip skips a None projection, the Linear applies it here
        clip.text_projection = None
        self.clip = clip

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] -> [B, d] unit norm."""
        return F.normalize(self.visual_projection(self.clip.visual(images)), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, L] -> [B, d] unit norm."""
        return F.normalize(self.text_projection(self.clip.encode_text(tokens)), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encode_image(images), self.encode_text(tokens)


def lora_target_regex(targets: Sequence[str], layers: Sequence[int]) -> str:
    """The full-match regex PEFT applies to module names (see the module docstring)."""
    blocks = "|".join(str(int(i)) for i in sorted(set(layers)))
    parts = [
        rf"{_ATTENTION_PREFIX[t]}\.resblocks\.({blocks})\.attn" for t in targets if t in _ATTENTION_PREFIX
    ]
    parts += [t.replace("vision_", "visual_") for t in targets if t.endswith("_projection")]
    if not parts:
        raise ValueError(f"no LoRA targets in {list(targets)}")
    return "|".join(f"(?:{p})" for p in parts)


def lora_config(lora: LoraSection):
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora_target_regex(lora.targets, lora.layers),
    )


def build_lora_clip(clip_cfg: ClipSection, lora: LoraSection, device: str = "cpu"):
    """(peft model around ProjectedClip, preprocess, tokenizer); only the LoRA factors train."""
    from peft import get_peft_model

    arch = clip_cfg.model_config_path
    if arch and not Path(arch).is_file() and (CONFIG_DIR / Path(arch).name).is_file():
        arch = str(CONFIG_DIR / Path(arch).name)  # bundled configs work from any working directory
    clip, preprocess, tokenizer = load_open_clip(
        clip_cfg.model_name, pretrained=clip_cfg.pretrained, model_config=arch
    )
    n_blocks = len(clip.visual.transformer.resblocks)
    if max(lora.layers) >= n_blocks:
        raise ValueError(f"lora.layers {lora.layers} outside the model's {n_blocks} blocks")
    model = get_peft_model(ProjectedClip(clip), lora_config(lora)).to(device)
    return model, preprocess, tokenizer


def save_adapter(model, out_dir: str | Path, clip_cfg: ClipSection, lora: LoraSection) -> Path:
    """Write the LoRA factors and what rebuilds the model around them; returns the folder."""
    from peft import get_peft_model_state_dict

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in get_peft_model_state_dict(model).items()}
    torch.save(state, out / ADAPTER_FILE)
    if clip_cfg.pretrained is None:
        base = {k: v.detach().cpu() for k, v in model.named_parameters() if "lora_" not in k}
        torch.save(base, out / BASE_FILE)
    meta = {"clip": clip_cfg.model_dump(mode="json"), "lora": lora.model_dump(mode="json")}
    (out / ADAPTER_CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def load_lora_clip(adapter_dir: str | Path, device: str = "cpu", pretrained: str | None = None):
    """(model, preprocess, tokenizer) rebuilt from a `save_adapter` folder, in eval mode.

    pretrained: the base checkpoint file, when it moved since training (None = the recorded one).
    """
    from peft import set_peft_model_state_dict

    folder = Path(adapter_dir)
    if not (folder / ADAPTER_FILE).is_file() or not (folder / ADAPTER_CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no LoRA-CLIP adapter ({ADAPTER_FILE}, {ADAPTER_CONFIG_FILE}) in {folder}")
    meta = json.loads((folder / ADAPTER_CONFIG_FILE).read_text())
    clip_cfg = ClipSection.model_validate(meta["clip"])
    if pretrained is not None:
        clip_cfg = clip_cfg.model_copy(update={"pretrained": pretrained})
    model, preprocess, tokenizer = build_lora_clip(clip_cfg, LoraSection.model_validate(meta["lora"]), device)
    if clip_cfg.pretrained is None and (folder / BASE_FILE).is_file():
        base = torch.load(folder / BASE_FILE, map_location=device, weights_only=True)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in base:
                    param.copy_(base[name])
    state = torch.load(folder / ADAPTER_FILE, map_location=device, weights_only=True)
    result = set_peft_model_state_dict(model, state)
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"adapter in {folder} does not fit the model: {result.unexpected_keys[:3]}")
    model.eval()
    return model, preprocess, tokenizer
