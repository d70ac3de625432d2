"""Synthetic checkpoints: the real config and tokenizer files (from the Hugging Face Hub when online, else from
shared/) plus random weights in the official
layout (key names, dtypes, file names), so they load through the real loader.

Every tensor is random, 1-D ones included, at scales that keep activations finite over long generations:
unit-variance embeddings, 1/sqrt(fan_in) projections, residual outputs further divided by sqrt(2 * layers), norm
gains within 1 +- 0.1, small biases, LayerScale and SnakeBeta near their usual values. `tiny=True` shrinks layers
and widths for CPU tests but keeps every structural feature: GQA with q/k-norm, a Talker wider than the code predictor
(so the 2048->1024-style projection exists), 16 code groups, the full text and codec vocabularies and special ids,
the codec's 1920-sample frame, sliding window 72, and the ECAPA block structure.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..model.checkpoint import CODEC_DIR, INDEX, WEIGHTS, expected_shapes
from ..model.config import parse_config

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
CONFIG_FILES = ("config.json", "generation_config.json", "preprocessor_config.json",
                f"{CODEC_DIR}/config.json", f"{CODEC_DIR}/preprocessor_config.json")

TINY_TALKER = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, text_hidden_size=48)
TINY_PREDICTOR = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16)
TINY_SPEAKER = dict(enc_channels=[16, 16, 16, 16, 48], enc_attention_channels=8, enc_se_channels=8)
TINY_CODEC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=8, latent_dim=32, codebook_dim=16, decoder_dim=48)
# The codec encoder keeps its 1920-sample frame (ratios 8,6,5,4 and the stride-2 downsample) and 32 quantizers.
TINY_ENCODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, num_filters=4, codebook_dim=16,
                    vector_quantization_hidden_dimension=16, upsample_groups=32)


def default_shared() -> Path:
    """$VOXGATE_SHARED, else `<repo>/../shared` (this file lives at <repo>/engine/qwen3tts/tools/)."""
    env = os.environ.get("VOXGATE_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3].parent / "shared"


def source_dirs(like: str, shared: Path | None = None) -> tuple[Path, Path]:
    root = (shared or default_shared()) / "qwen3-tts"
    ckpt, tok = root / "checkpoints" / like, root / "text-tokenizer"
    if not ckpt.is_dir():
        known = sorted(p.name for p in (root / "checkpoints").glob("*")) if (root / "checkpoints").is_dir() else []
        raise FileNotFoundError(f"{ckpt}: no such checkpoint config; known: {known or 'none (is --shared right?)'}")
    return ckpt, tok


def hub_dirs(like: str) -> tuple[Path, Path]:
    """The configs and text-tokenizer files of `Qwen/<like>` from the Hugging Face Hub (never its weights): one
    directory that is both the checkpoint source and the tokenizer source. Raises OSError when offline."""
    from huggingface_hub import snapshot_download

    repo = like if "/" in like else f"Qwen/{like}"
    folder = Path(snapshot_download(repo, allow_patterns=[*CONFIG_FILES, *TOKENIZER_FILES], etag_timeout=5))
    missing = [f for f in ("config.json", "generation_config.json", f"{CODEC_DIR}/config.json", *TOKENIZER_FILES)
               if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{repo} on the Hub lacks {', '.join(missing)}")
    return folder, folder


def find_sources(like: str, shared: Path | None = None) -> tuple[Path, Path]:
    """Configs and tokenizer for `like`: from the Hub when online (unless `shared` is given or HF_HUB_OFFLINE is
    set), else from the shared folder; a FileNotFoundError in one line naming what is missing where."""
    hub_error = "skipped (--shared given)" if shared is not None else "skipped (HF_HUB_OFFLINE)"
    if shared is None and os.environ.get("HF_HUB_OFFLINE", "") in ("", "0"):
        try:
            return hub_dirs(like)
        except Exception as exc:  # offline, no such repo, a proxy refusing: fall back to the local folder
            hub_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    try:
        return source_dirs(like, shared)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"no configs/tokenizer for {like}: Hub: {hub_error}; local: {exc}") from None


def tiny_configs(config: dict[str, Any], codec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    config, codec = copy.deepcopy(config), copy.deepcopy(codec)
    talker = config["talker_config"]
    predictor = talker["code_predictor_config"]
    equal_widths = predictor["hidden_size"] == talker["hidden_size"]  # 0.6B: no projection tensor at all
    talker.update(TINY_TALKER)
    predictor.update(TINY_PREDICTOR)
    if equal_widths:
        predictor["hidden_size"] = talker["hidden_size"]
    if config.get("speaker_encoder_config") is not None:
        # The x-vector is a speaker row of the Talker's width.
        config["speaker_encoder_config"].update(TINY_SPEAKER, enc_dim=talker["hidden_size"])
    codec["decoder_config"].update(TINY_CODEC)
    codec["encoder_config"].update(TINY_ENCODER)
    return config, codec


def _around(center: float, spread: float, shape: tuple[int, ...], gen: torch.Generator,
            device: torch.device) -> torch.Tensor:
    """center * (1 + u), u uniform in [-spread, spread): a scale near its usual value, but no two entries equal."""
    return center * (1 + spread * (2 * torch.rand(shape, generator=gen, device=device) - 1))


def _init(name: str, shape: tuple[int, ...], layers: int, gen: torch.Generator, device: torch.device,
          layer_scale: float) -> torch.Tensor:
    """One tensor's random value. 1-D tensors are random too (a constant bias, norm weight or SnakeBeta parameter
    would let a wrong slice or fold of it pass every parity test), at scales that keep activations finite over
    long generations."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "initialized":
        return torch.ones(shape, device=device)  # the codec encoder's "codebook initialized" flag: set when trained
    if leaf in ("alpha", "beta"):  # SnakeBeta, log space: e^alpha and e^-beta within about 0.8-1.2
        return 0.2 * (2 * torch.rand(shape, generator=gen, device=device) - 1)
    if leaf == "cluster_usage":  # the codebook divides by it: positive
        return 0.5 + 1.5 * torch.rand(shape, generator=gen, device=device)
    if leaf == "scale":  # LayerScale
        return _around(layer_scale, 0.5, shape, gen, device)
    if leaf == "gamma":  # ConvNeXt's own layer scale
        return _around(0.1, 0.5, shape, gen, device)
    if len(shape) == 1 and "norm" in name and leaf == "weight":  # RMSNorm / LayerNorm gains, q/k norms
        return _around(1.0, 0.1, shape, gen, device)
    if len(shape) == 1:  # biases, LayerNorm shifts
        return 0.02 * torch.randn(shape, generator=gen, device=device)
    x = torch.randn(shape, generator=gen, device=device)
    if "embedding" in name:  # codec/text tables and codebooks: unit variance
        return x
    std = (shape[1] * (shape[2] if len(shape) > 2 else 1)) ** -0.5
    if leaf == "weight" and any(s in name for s in ("o_proj", "down_proj", "conv2.conv")):
        std /= (2 * layers) ** 0.5  # residual branch outputs
    if len(shape) == 3 and shape[0] == 1:
        std *= 0.2  # the codec's last conv: keep most samples inside the final [-1, 1] clamp
    return x * std


def random_state(shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, gen: torch.Generator,
                 device: torch.device, layers: int, layer_scale: float = 0.01,
                 progress: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    out = {}
    for name in sorted(shapes):
        out[name] = _init(name, shapes[name], layers, gen, device, layer_scale).to(dtype).cpu().contiguous()
        if progress is not None:
            progress(name)
    return out


def encoder_shapes(codec_config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """`encoder.*` of the official speech_tokenizer file (the Mimi encoder half), shapes only (meta device)."""
    from ..codec.codec_encoder import CodecEncoder
    from ..model.config import CodecEncoderConfig

    valid = int(codec_config["encoder_valid_num_quantizers"])
    cfg = CodecEncoderConfig.from_dict(codec_config["encoder_config"], valid)
    with torch.device("meta"):
        encoder = CodecEncoder(cfg)
    return {f"encoder.{k}": tuple(v.shape) for k, v in encoder.state_dict().items()}


def save_sharded(state: dict[str, torch.Tensor], directory: Path, shard_bytes: int | None) -> None:
    meta = {"format": "pt"}
    if not shard_bytes:
        save_file(state, str(directory / WEIGHTS), metadata=meta)
        return
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, v in state.items():
        nbytes = v.numel() * v.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = v
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / fname), metadata=meta)
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(v.numel() * v.element_size() for v in state.values())
    (directory / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def write_synthetic(like: str, out: str | Path, seed: int = 0, tiny: bool = False, shared: Path | None = None,
                    device: str | torch.device = "cpu", talker_dtype: torch.dtype = torch.bfloat16,
                    shard_bytes: int | None = None, with_encoder: bool = True, with_model: bool = True,
                    with_decoder: bool = True, progress: Callable[[str], None] | None = None) -> Path:
    """Write a checkpoint directory shaped like shared/qwen3-tts/checkpoints/<like> with random weights.

    with_model=False writes no `model.safetensors` and with_decoder=False no `decoder.*`: a partial directory for
    tests of one part at its real shapes (`load_codec_encoder` reads only the configs and `speech_tokenizer/`).
    """
    src, tok = find_sources(like, shared)
    out = Path(out)
    (out / CODEC_DIR).mkdir(parents=True, exist_ok=True)
    for rel in CONFIG_FILES:
        if (src / rel).is_file():
            shutil.copyfile(src / rel, out / rel)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tok / name, out / name)
    config = json.loads((src / "config.json").read_text())
    codec_config = json.loads((src / CODEC_DIR / "config.json").read_text())
    if tiny:
        config, codec_config = tiny_configs(config, codec_config)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        (out / CODEC_DIR / "config.json").write_text(json.dumps(codec_config, indent=2))
    gen_cfg = json.loads((src / "generation_config.json").read_text())
    cfg = parse_config(config, codec_config, gen_cfg)
    model_shapes, codec_shapes = expected_shapes(cfg, with_encoder)
    device = torch.device(device)
    gen = torch.Generator(device).manual_seed(seed)
    if with_model:
        layers = cfg.talker.layers.num_hidden_layers
        state = random_state(model_shapes, talker_dtype, gen, device, layers, progress=progress)
        save_sharded(state, out, shard_bytes)
        del state
    if not with_decoder:
        codec_shapes = {k: s for k, s in codec_shapes.items() if not k.startswith("decoder.")}
    # Sorted draws: decoder.* before encoder.*, so adding the encoder leaves the decoder's values unchanged.
    codec_state = random_state(codec_shapes, torch.float32, gen, device, cfg.codec.num_hidden_layers,
                               cfg.codec.layer_scale_initial_scale, progress=progress)
    save_file(codec_state, str(out / CODEC_DIR / WEIGHTS), metadata={"format": "pt"})
    return out
