"""Building the configured open_clip network, with the activation its weights were trained with.

OpenAI's CLIP weights were trained with QuickGELU (x * sigmoid(1.702 x)). open_clip's plain
`ViT-L-14` config uses exact GELU and switches QuickGELU on only for its own `openai` pretrained
tag, never for a checkpoint path: loading OpenAI's weights from a file into `ViT-L-14` runs a
slightly different network. So the activation is decided here, in this order:

1. `dedupe.clip_quick_gelu` when set (true or false);
2. a model name whose open_clip config already has it (`ViT-L-14-quickgelu`);
3. the checkpoint itself: OpenAI's TorchScript release, a state dict carrying OpenAI's metadata
   entries (`input_resolution`, `context_length`, `vocab_size`), an `open_clip_config.json` beside
   it (Hugging Face open_clip repositories) stating `quick_gelu`, or "openai" in the file name or in
   the name of the model directory holding it (`timm/vit_large_patch14_clip_224.openai/
   open_clip_pytorch_model.bin`, or the hub cache's `models--timm--vit_large_patch14_clip_224.openai/
   snapshots/<hash>/...`, where the file name itself is generic);
4. otherwise GELU.

The decision and its reason go to the dedupe summary.
"""

from __future__ import annotations

import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lenses_data.config.dedupe import DedupeConfig

log = logging.getLogger(__name__)

# Entries of OpenAI's state dicts that are not parameters (open_clip drops them for TorchScript files).
OPENAI_METADATA_KEYS = frozenset({"input_resolution", "context_length", "vocab_size"})


@dataclass(frozen=True)
class Activation:
    quick_gelu: bool
    reason: str

    @property
    def name(self) -> str:
        return "QuickGELU" if self.quick_gelu else "GELU"


def is_torchscript_archive(path: str | Path) -> bool:
    """OpenAI's own release files are TorchScript archives (a zip holding constants.pkl)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("/constants.pkl") or name == "constants.pkl" for name in archive.namelist())


def _state_dict_keys(path: Path) -> set[str]:
    """Top-level keys of a torch.save'd checkpoint, without reading the tensors (memory-mapped)."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return set(handle.keys())
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # an old non-zip pickle cannot be memory-mapped: open_clip reports it later
        return set()
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    return {key.removeprefix("module.") for key in checkpoint} if isinstance(checkpoint, dict) else set()


def _sidecar_quick_gelu(path: Path) -> bool | None:
    sidecar = path.parent / "open_clip_config.json"
    if not sidecar.is_file():
        return None
    try:
        model_cfg = json.loads(sidecar.read_text()).get("model_cfg", {})
    except (OSError, ValueError, AttributeError):
        return None
    value = model_cfg.get("quick_gelu") if isinstance(model_cfg, dict) else None
    return value if isinstance(value, bool) else None


def model_directory(path: Path) -> Path:
    """The directory that names the model: the file's own, or in the Hugging Face hub cache
    (`models--org--name/snapshots/<hash>/file`) the repository's directory above the snapshot."""
    if path.parent.parent.name == "snapshots":
        return path.parent.parent.parent
    return path.parent


def checkpoint_activation(path: str | Path) -> Activation | None:
    """What the checkpoint file says about its activation; None when it says nothing."""
    path = Path(path)
    if is_torchscript_archive(path):
        return Activation(True, "checkpoint is an OpenAI TorchScript release")
    if OPENAI_METADATA_KEYS & _state_dict_keys(path):
        return Activation(True, "checkpoint carries OpenAI's metadata entries")
    sidecar = _sidecar_quick_gelu(path)
    if sidecar is not None:
        return Activation(sidecar, f"{path.parent / 'open_clip_config.json'} sets quick_gelu={sidecar}")
    if "openai" in path.name.lower():
        return Activation(True, "checkpoint file name names OpenAI weights")
    directory = model_directory(path)
    if "openai" in directory.name.lower():  # only the model's own directory, not every parent
        return Activation(True, f"checkpoint's model directory {directory.name} names OpenAI weights")
    return None


def decide_activation(config: DedupeConfig) -> Activation:
    import open_clip

    model_cfg = open_clip.get_model_config(config.clip_model) or {}
    built_in = bool(model_cfg.get("quick_gelu", False))
    if config.clip_quick_gelu is not None:
        if built_in and not config.clip_quick_gelu:
            raise ValueError(
                f"dedupe.clip_quick_gelu is false but model {config.clip_model} is a QuickGELU config; "
                "name the plain architecture instead"
            )
        return Activation(config.clip_quick_gelu, "set by dedupe.clip_quick_gelu")
    if built_in:
        return Activation(True, f"model config {config.clip_model} uses it")
    found = checkpoint_activation(config.clip_checkpoint) if config.clip_checkpoint else None
    return found or Activation(False, "open_clip default (no sign of OpenAI weights)")


def _load_weights(model, checkpoint: str) -> None:
    """open_clip's loader, accepting OpenAI's TorchScript files and their metadata entries."""
    import open_clip

    torchscript = is_torchscript_archive(checkpoint)  # torch.load refuses these with weights_only
    result = open_clip.load_checkpoint(model, checkpoint, strict=False, weights_only=not torchscript)
    # Buffers the model computes itself (the text mask) are saved by a traced TorchScript file.
    computed = {name for name, _ in model.named_buffers()} - set(model.state_dict())
    unexpected = set(result.unexpected_keys) - OPENAI_METADATA_KEYS - computed
    if result.missing_keys or unexpected:
        raise ValueError(
            f"dedupe.clip_checkpoint {checkpoint} does not fit {type(model).__name__}: "
            f"missing {sorted(result.missing_keys)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )


def load_model(config: DedupeConfig, device: str):
    """(model, preprocess, activation) from a local checkpoint, or random weights when explicitly allowed."""
    import open_clip

    if config.clip_model_config:
        open_clip.add_model_config(config.clip_model_config)
    checkpoint = config.clip_checkpoint
    if checkpoint and not Path(checkpoint).is_file():
        raise FileNotFoundError(f"dedupe.clip_checkpoint: no such file {checkpoint}")
    if not checkpoint and not config.clip_random_weights:
        raise ValueError("CLIP signal is off: set dedupe.clip_checkpoint to a local checkpoint file")
    activation = decide_activation(config)
    log.info("CLIP %s with %s (%s)", config.clip_model, activation.name, activation.reason)
    model, _, preprocess = open_clip.create_model_and_transforms(
        config.clip_model, pretrained=None, force_quick_gelu=activation.quick_gelu
    )
    if checkpoint:
        _load_weights(model, checkpoint)
    model.to(device).eval()
    return model, preprocess, activation
