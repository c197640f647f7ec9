"""The CLIP network the dedupe stage builds: QuickGELU for OpenAI weights however they are named,
bf16 autocast close to fp32, and threaded decoding that keeps order and every failure."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data

from lenses_data.config.dedupe import DedupeConfig
from lenses_data.dedupe.clip_embed import embed_images, encode
from lenses_data.dedupe.clip_model import OPENAI_METADATA_KEYS, load_model

# Small, but deep and wide enough that bf16 rounding accumulates over several blocks.
SMALL = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "layers": 4, "width": 128, "patch_size": 16, "head_width": 32},
    "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
}


def _activations(model) -> set[str]:
    import open_clip.transformer as oct

    return {type(m).__name__ for m in model.visual.modules() if isinstance(m, (torch.nn.GELU, oct.QuickGELU))}


@pytest.fixture(scope="module")
def small_config(tmp_path_factory) -> str:
    import open_clip

    path = tmp_path_factory.mktemp("clipnet") / "lenses-small-clip.json"
    path.write_text(json.dumps(SMALL))
    open_clip.add_model_config(str(path))
    return str(path)


@pytest.fixture(scope="module")
def state_dict(small_config: str) -> dict:
    import open_clip

    torch.manual_seed(11)
    return open_clip.create_model("lenses-small-clip", pretrained=None).state_dict()


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[str]:
    """Real photographs: PNG and JPEG (one large enough for a DCT-scaled decode), and broken files."""
    folder = tmp_path_factory.mktemp("netimgs")
    paths = []
    for name in ("astronaut", "chelsea", "coffee", "rocket"):
        array = getattr(data, name)()
        path = folder / f"{name}.{'png' if name == 'chelsea' else 'jpg'}"
        Image.fromarray(array).save(path, quality=92)
        paths.append(str(path))
    big = folder / "astronaut-big.jpg"
    Image.fromarray(data.astronaut()).resize((1024, 1024), Image.Resampling.BICUBIC).save(big, quality=92)
    (folder / "broken.jpg").write_bytes(b"not an image")
    (folder / "truncated.jpg").write_bytes(big.read_bytes()[:2000])
    return [paths[0], str(folder / "broken.jpg"), *paths[1:], str(big), str(folder / "truncated.jpg")]


def _config(small_config: str, checkpoint, **extra) -> DedupeConfig:
    return DedupeConfig(
        clip_model="lenses-small-clip",
        clip_model_config=small_config,
        clip_checkpoint=str(checkpoint),
        clip_device="cpu",
        **extra,
    )


def test_openai_named_checkpoint_runs_with_quick_gelu(small_config, state_dict, images, tmp_path) -> None:
    checkpoint = tmp_path / "lenses-small-clip-openai.pt"
    torch.save(state_dict, checkpoint)
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"QuickGELU"}
    assert activation.quick_gelu and "file name" in activation.reason
    quick = embed_images(images, _config(small_config, checkpoint))
    gelu = embed_images(images, _config(small_config, checkpoint, clip_quick_gelu=False))
    assert quick.settings["activation"] == "QuickGELU" and gelu.settings["activation"] == "GELU"
    assert not np.allclose(quick.embeddings, gelu.embeddings, atol=1e-3)  # a different network


def test_plain_name_stays_gelu(small_config, state_dict, tmp_path) -> None:
    checkpoint = tmp_path / "lenses-small-clip-laion.pt"
    torch.save(state_dict, checkpoint)
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"GELU"} and not activation.quick_gelu


def test_openai_metadata_entries_mean_quick_gelu_and_still_load(small_config, state_dict, tmp_path) -> None:
    checkpoint = tmp_path / "weights.pt"  # nothing in the name: the file's own entries decide
    torch.save({**state_dict, **{key: torch.tensor(64) for key in OPENAI_METADATA_KEYS}}, checkpoint)
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"QuickGELU"} and "metadata" in activation.reason
    loaded = model.state_dict()["visual.conv1.weight"]
    assert torch.equal(loaded, state_dict["visual.conv1.weight"])


def test_torchscript_release_means_quick_gelu_and_loads(small_config, state_dict, tmp_path) -> None:
    """OpenAI published TorchScript archives; torch.load refuses them with weights_only, so today's
    loader could not read one at all."""
    import open_clip

    source = open_clip.create_model("lenses-small-clip", pretrained=None)
    source.load_state_dict(state_dict)
    example = {"encode_image": torch.randn(1, 3, 64, 64)}
    traced = torch.jit.trace_module(source.eval(), example, check_trace=False)
    checkpoint = tmp_path / "clip.pt"
    torch.jit.save(traced, str(checkpoint))
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"QuickGELU"} and "TorchScript" in activation.reason
    assert torch.equal(model.state_dict()["visual.proj"], state_dict["visual.proj"])


def test_open_clip_sidecar_config_decides(small_config, state_dict, tmp_path) -> None:
    checkpoint = tmp_path / "open_clip_pytorch_model.bin"
    torch.save(state_dict, checkpoint)
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": {"quick_gelu": True}}))
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"QuickGELU"} and "open_clip_config.json" in activation.reason


@pytest.mark.parametrize(
    "layout",
    [
        "timm/vit_large_patch14_clip_224.openai",  # a Hugging Face repository downloaded as a folder
        "hub/models--timm--vit_large_patch14_clip_224.openai/snapshots/0123abcd",  # the hub cache
    ],
)
def test_openai_model_directory_decides_without_sidecar(small_config, state_dict, tmp_path, layout) -> None:
    """The file name is generic and no open_clip_config.json lies beside it: the directory names OpenAI."""
    folder = tmp_path / "weights" / layout
    folder.mkdir(parents=True)
    checkpoint = folder / "open_clip_pytorch_model.bin"
    torch.save(state_dict, checkpoint)
    model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
    assert _activations(model) == {"QuickGELU"}
    assert "vit_large_patch14_clip_224.openai" in activation.reason and "directory" in activation.reason


def test_only_the_model_directory_counts(small_config, state_dict, tmp_path) -> None:
    """A non-OpenAI model under a folder that happens to say openai, and a hub snapshot of a LAION
    model, stay GELU: only the directory that names the model is read."""
    for layout in (
        "openai-mirror/laion/CLIP-ViT-L-14-laion2B",
        "hub/models--laion--CLIP-ViT-L-14/snapshots/ab12",
    ):
        folder = tmp_path / "w" / layout
        folder.mkdir(parents=True)
        checkpoint = folder / "open_clip_pytorch_model.bin"
        torch.save(state_dict, checkpoint)
        model, _, activation = load_model(_config(small_config, checkpoint), "cpu")
        assert _activations(model) == {"GELU"} and not activation.quick_gelu, layout


def test_quick_gelu_model_name_cannot_be_switched_off(small_config, state_dict, tmp_path) -> None:
    import open_clip

    quick = tmp_path / "lenses-small-clip-quickgelu.json"
    quick.write_text(json.dumps({**SMALL, "quick_gelu": True}))
    open_clip.add_model_config(str(quick))
    checkpoint = tmp_path / "w.pt"
    torch.save(state_dict, checkpoint)
    config = _config(small_config, checkpoint).model_copy(
        update={"clip_model": "lenses-small-clip-quickgelu"}
    )
    model, _, activation = load_model(config, "cpu")
    assert _activations(model) == {"QuickGELU"} and "model config" in activation.reason
    with pytest.raises(ValueError, match="clip_quick_gelu"):
        load_model(config.model_copy(update={"clip_quick_gelu": False}), "cpu")


def test_checkpoint_of_another_shape_is_a_clear_error(small_config, state_dict, tmp_path) -> None:
    checkpoint = tmp_path / "partial.pt"
    torch.save({k: v for k, v in state_dict.items() if not k.startswith("visual.transformer")}, checkpoint)
    with pytest.raises(ValueError, match="does not fit"):
        load_model(_config(small_config, checkpoint), "cpu")


def test_bf16_autocast_stays_within_cosine_0999_of_fp32(small_config, state_dict, images, tmp_path) -> None:
    """CPU bf16 autocast stands in for CUDA's (same dtype, same autocast op lists for matmuls)."""
    checkpoint = tmp_path / "small-openai.pt"
    torch.save(state_dict, checkpoint)
    fp32 = embed_images(images, _config(small_config, checkpoint, clip_precision="fp32"))
    bf16 = embed_images(images, _config(small_config, checkpoint, clip_precision="bf16"))
    assert bf16.settings["precision"] == "bf16" and fp32.settings["precision"] == "fp32"
    cosines = (fp32.embeddings * bf16.embeddings).sum(axis=1)
    assert cosines.min() >= 0.999, cosines
    assert not np.array_equal(fp32.embeddings, bf16.embeddings)  # bf16 really ran


def test_autocast_runs_only_when_asked(small_config, state_dict) -> None:
    import open_clip

    model = open_clip.create_model("lenses-small-clip", pretrained=None).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.inference_mode():
        assert torch.equal(encode(model, x, "fp32"), encode(model, x, "fp32"))
        assert not torch.equal(encode(model, x, "fp32"), encode(model, x, "bf16"))
        assert encode(model, x, "bf16").dtype == torch.float32


def test_threads_keep_order_and_every_failure(small_config, state_dict, images, tmp_path) -> None:
    checkpoint = tmp_path / "w.pt"
    torch.save(state_dict, checkpoint)
    inline = embed_images(images, _config(small_config, checkpoint, clip_decode_workers=1, clip_batch_size=3))
    threaded = embed_images(
        images, _config(small_config, checkpoint, clip_decode_workers=3, clip_batch_size=2)
    )
    assert threaded.ok.tolist() == [True, False, True, True, True, True, False]
    assert sorted(threaded.errors) == [1, 6] and "truncated" in threaded.errors[6].lower()
    assert threaded.ok.tolist() == inline.ok.tolist() and threaded.errors.keys() == inline.errors.keys()
    assert np.allclose(threaded.embeddings, inline.embeddings, atol=1e-5)
    assert threaded.settings["decode_workers"] == 3


def test_batch_level_normalisation_equals_open_clips_transform(small_config, images) -> None:
    import open_clip

    from lenses_data.dedupe.clip_views import make_view, plan_from_transform, to_model_input

    _, _, preprocess = open_clip.create_model_and_transforms("lenses-small-clip", pretrained=None)
    plan = plan_from_transform(preprocess)
    assert plan.fused is None and len(plan.pil_steps) >= 2
    good = [images[0], images[2], images[5]]
    ours = to_model_input([make_view(p, plan, None) for p in good], plan, "cpu")
    expected = torch.stack([preprocess(Image.open(p)) for p in good])
    assert torch.allclose(ours, expected, atol=1e-6)


def test_jpeg_draft_decodes_smaller_and_keeps_the_view(small_config, images) -> None:
    import open_clip

    from lenses_data.candidates.imaging import load_rgb
    from lenses_data.dedupe.clip_views import make_view, plan_from_transform

    big = images[5]
    assert load_rgb(big, draft=(64, 64)).size == (128, 128)  # 1024 px at 1/8: both sides still >= 64
    assert load_rgb(images[2], draft=(64, 64)).size == load_rgb(images[2]).size  # PNG: full decode
    _, _, preprocess = open_clip.create_model_and_transforms("lenses-small-clip", pretrained=None)
    plan = plan_from_transform(preprocess)
    full, draft = make_view(big, plan, None), make_view(big, plan, 64)
    assert full.shape == draft.shape == (64, 64, 3)
    assert np.abs(full.astype(int) - draft.astype(int)).mean() < 4  # of 255: the same picture


def test_unusual_transform_runs_whole_in_threads(small_config) -> None:
    from torchvision import transforms

    from lenses_data.dedupe.clip_views import iter_view_batches, plan_from_transform

    odd = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])  # no Normalize
    plan = plan_from_transform(odd)
    assert plan.fused is odd
    folder = data.__file__  # any path that is not an image: an error, not a crash
    batches = list(iter_view_batches([folder], plan, 4, 2, None))
    assert batches[0].errors and not batches[0].views


def test_plan_defaults_follow_the_device() -> None:
    from lenses_data.dedupe.clip_embed import embed_plan

    gpu, cpu = embed_plan(DedupeConfig(), "cuda:1"), embed_plan(DedupeConfig(), "cpu")
    assert (gpu.precision, gpu.batch_size) == ("bf16", 256)
    assert (cpu.precision, cpu.batch_size) == ("fp32", 64)
    asked = embed_plan(DedupeConfig(clip_precision="bf16", clip_batch_size=8, clip_decode_workers=3), "cpu")
    assert (asked.precision, asked.batch_size, asked.decode_workers) == ("bf16", 8, 3)


def test_draft_handles_the_pools_odd_files(sample_pool, small_config) -> None:
    """CMYK and EXIF-rotated JPEGs, 16-bit, palette+alpha, animated: the drafted view is the same
    picture, the same way up, as the full decode's."""
    import open_clip

    from lenses_data.dedupe.clip_views import make_view, plan_from_transform

    _, _, preprocess = open_clip.create_model_and_transforms("lenses-small-clip", pretrained=None)
    plan = plan_from_transform(preprocess)
    edge = sorted((sample_pool / "edge").iterdir())
    assert {p.name for p in edge} >= {"cmyk.jpg", "exif_rotated.jpg", "gray16.png", "animated.gif"}
    for path in edge:
        full, draft = make_view(str(path), plan, None), make_view(str(path), plan, 64)
        assert full.shape == draft.shape == (64, 64, 3), path.name
        assert np.abs(full.astype(int) - draft.astype(int)).mean() < 6, path.name


def test_production_names_decide_quick_gelu(state_dict, tmp_path) -> None:
    """configs/production.yaml: plain `ViT-L-14` with `ViT-L-14-openai.pt` (decided without building it)."""
    from pathlib import Path

    from lenses_data.config import load_config
    from lenses_data.dedupe.clip_model import decide_activation

    production = load_config(Path(__file__).resolve().parents[3] / "configs" / "production.yaml", environ={})
    assert production.dedupe.clip_model == "ViT-L-14" and production.dedupe.clip_quick_gelu is True
    checkpoint = tmp_path / Path(production.dedupe.clip_checkpoint).name
    torch.save(state_dict, checkpoint)
    unset = production.dedupe.model_copy(update={"clip_checkpoint": str(checkpoint), "clip_quick_gelu": None})
    assert decide_activation(unset).quick_gelu  # the file name alone is enough
    assert decide_activation(unset.model_copy(update={"clip_model": "ViT-L-14-quickgelu"})).quick_gelu
