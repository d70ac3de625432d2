"""Checkpoint loading: a local directory or a Hugging Face repo id, official key names, strict key checking.

`model.safetensors` (or shards + `model.safetensors.index.json`) holds `talker.*` (bf16) and, for Base,
`speaker_encoder.*`; `speech_tokenizer/model.safetensors` holds `decoder.*` (fp32) and `encoder.*` (the codec
encoder, for ICL reference codes from audio). A file without any `encoder.*` key (`voxgate checkpoint synth
--no-encoder`) loads without the encoder; one with some of its keys must have them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from tqdm.auto import tqdm

from ..codec.codec import CodecDecoder
from ..codec.codec_encoder import CodecEncoder
from .config import CODEC_CONFIG, CodecEncoderConfig, ConfigError, Qwen3TTSConfig, load_config
from .speaker_encoder import SpeakerEncoder
from .talker import Talker

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
CODEC_DIR = "speech_tokenizer"
ENCODER_PREFIX = "encoder."
ALLOW_PATTERNS = ["*.json", "*.txt", "*.safetensors", f"{CODEC_DIR}/*"]


class CheckpointError(ValueError):
    """A checkpoint whose files or keys do not match the architecture its config describes."""


class Qwen3TTSWeights(nn.Module):
    """The `model.safetensors` module tree: `talker` and, for Base, `speaker_encoder`."""

    def __init__(self, cfg: Qwen3TTSConfig) -> None:
        super().__init__()
        self.talker = Talker(cfg.talker)
        self.speaker_encoder = SpeakerEncoder(cfg.speaker_encoder) if cfg.speaker_encoder is not None else None


class CodecWeights(nn.Module):
    """`speech_tokenizer/model.safetensors`: `decoder.*` and, when asked for, `encoder.*`."""

    def __init__(self, cfg: Qwen3TTSConfig, with_encoder: bool = False, directory: Path | None = None) -> None:
        super().__init__()
        self.decoder = CodecDecoder(cfg.codec)
        self.encoder = CodecEncoder(encoder_config(cfg, directory)) if with_encoder else None


def encoder_config(cfg: Qwen3TTSConfig, directory: Path | None = None) -> CodecEncoderConfig:
    """The codec encoder's config, checked now that the encoder is built: a one-line ConfigError names the file
    (under `directory`) and the key."""
    try:
        encoder = cfg.codec_encoder
    except ConfigError as exc:
        if directory is None:
            raise
        raise ConfigError(f"{directory}/{exc}") from None
    if encoder is None:
        raise CheckpointError(f"{directory or '.'}/{CODEC_CONFIG} has no encoder_config")
    return encoder


def resolve(path_or_id: str | Path) -> Path:
    """A local checkpoint directory, or a hub repo id fetched with snapshot_download."""
    p = Path(path_or_id).expanduser()
    if p.is_dir():
        return p
    if p.exists() or str(path_or_id).startswith((".", "/", "~")) or str(path_or_id).count("/") != 1:
        raise CheckpointError(f"{path_or_id}: not a checkpoint directory (or a Hugging Face repo id 'org/name')")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=str(path_or_id), allow_patterns=ALLOW_PATTERNS))


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of one part: a single file, or the shards an index names."""
    if (directory / INDEX).is_file():
        index = json.loads((directory / INDEX).read_text())
        files = sorted(set(index["weight_map"].values()))
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            raise CheckpointError(f"{directory / INDEX}: shard files missing: {missing}")
        return [directory / f for f in files]
    if (directory / WEIGHTS).is_file():
        return [directory / WEIGHTS]
    raise CheckpointError(f"{directory}: no {WEIGHTS} or {INDEX}")


def _describe(keys: Iterable[str], limit: int = 8) -> str:
    keys = sorted(keys)
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_into(module: nn.Module, files: list[Path], dtype: torch.dtype, device: torch.device, desc: str,
              ignore_prefixes: tuple[str, ...] = (), progress: bool = True) -> None:
    """Fill a meta-device module from safetensors files; every expected key exactly once, with the right shape."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    found: dict[str, tuple[int, ...]] = {}
    handles = [safe_open(str(f), framework="pt", device="cpu") for f in files]
    for h in handles:
        for k in h.keys():  # noqa: SIM118 (safe_open handles are not mappings)
            if not k.startswith(ignore_prefixes):
                found[k] = tuple(h.get_slice(k).get_shape())
    missing, unexpected = expected.keys() - found.keys(), found.keys() - expected.keys()
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys: {_describe(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_describe(unexpected)}")
        raise CheckpointError(f"{desc} ({', '.join(str(f) for f in files)}): " + "; ".join(parts))
    bad = {k: (found[k], s) for k, s in expected.items() if found[k] != s}
    if bad:
        raise CheckpointError(f"{desc}: shape mismatch: " + _describe(f"{k} {g} != {e}" for k, (g, e) in bad.items()))
    state = {}
    with tqdm(total=len(expected), desc=f"loading {desc}", unit="tensor", disable=not progress) as bar:
        for h in handles:
            for k in h.keys():  # noqa: SIM118
                if k in expected:
                    state[k] = h.get_tensor(k).to(device=device, dtype=dtype)
                    bar.update()
    module.load_state_dict(state, strict=True, assign=True)


def has_keys(files: list[Path], prefix: str) -> bool:
    for f in files:
        with safe_open(str(f), framework="pt", device="cpu") as h:
            if any(k.startswith(prefix) for k in h.keys()):  # noqa: SIM118
                return True
    return False


def load_checkpoint(path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                    codec_dtype: torch.dtype = torch.float32, progress: bool = True,
                    with_encoder: bool | None = None,
                    ) -> tuple[Path, Qwen3TTSConfig, Qwen3TTSWeights, CodecWeights]:
    """Build the modules on the meta device and assign the checkpoint tensors (no random init, no double copy).

    with_encoder: None loads the codec encoder when the file has `encoder.*` keys; True requires it; False skips it.
    """
    directory = resolve(path_or_id)
    cfg = load_config(directory)
    device = torch.device(device)
    codec_files = weight_files(directory / CODEC_DIR)
    if with_encoder is None:
        with_encoder = cfg.has_codec_encoder and has_keys(codec_files, ENCODER_PREFIX)
    with torch.device("meta"):
        weights = Qwen3TTSWeights(cfg)
        codec = CodecWeights(cfg, with_encoder, directory)
    load_into(weights, weight_files(directory), dtype, device, "model", progress=progress)
    load_into(codec, codec_files, codec_dtype, device, "speech_tokenizer",
              ignore_prefixes=() if with_encoder else (ENCODER_PREFIX,), progress=progress)
    return directory, cfg, weights.eval(), codec.eval()


def load_codec(path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               progress: bool = False) -> CodecDecoder:
    """Only the codec decoder of a checkpoint (`speech_tokenizer/`): the codec benchmark, tests, a codec alone."""
    directory = resolve(path_or_id)
    cfg = load_config(directory)
    with torch.device("meta"):
        codec = CodecWeights(cfg)
    load_into(codec, weight_files(directory / CODEC_DIR), dtype, torch.device(device), "speech_tokenizer",
              ignore_prefixes=(ENCODER_PREFIX,), progress=progress)
    return codec.decoder.eval()


def load_codec_encoder(path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                       progress: bool = False) -> CodecEncoder:
    """Only the codec encoder of a checkpoint (`speech_tokenizer/` `encoder.*`)."""
    directory = resolve(path_or_id)
    cfg = load_config(directory)
    with torch.device("meta"):
        encoder = CodecEncoder(encoder_config(cfg, directory))
    holder = nn.Module()  # `encoder.*` keys without building the decoder
    holder.encoder = encoder
    load_into(holder, weight_files(directory / CODEC_DIR), dtype, torch.device(device), "speech_tokenizer encoder",
              ignore_prefixes=("decoder.",), progress=progress)
    return encoder.eval()


def expected_shapes(cfg: Qwen3TTSConfig, with_encoder: bool = False,
                    ) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """Key -> shape of `model.safetensors` and of `speech_tokenizer/model.safetensors` (the decoder, plus the encoder
    when asked), computed on the meta device (no memory)."""
    with torch.device("meta"):
        w, c = Qwen3TTSWeights(cfg), CodecWeights(cfg, with_encoder)
    return ({k: tuple(v.shape) for k, v in w.state_dict().items()},
            {k: tuple(v.shape) for k, v in c.state_dict().items()})
