"""Import and build the reference implementation (`qwen-tts==0.1.1`) on a machine without its audio deps.

qwen_tts imports torchaudio, sox, librosa, soundfile, onnxruntime and einops at package import, for code paths the
parity tests never run (file I/O, resampling, the 25 Hz tokenizer). Those modules are stubbed in sys.modules before
the import. The one function the speaker encoder needs, `librosa.filters.mel`, is backed by transformers' own
slaney mel filter bank, an implementation independent of ours.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

STUBBED = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "sox", "librosa", "librosa.filters",
           "soundfile", "onnxruntime", "einops")


def _librosa_mel(*, sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    from transformers.audio_utils import mel_filter_bank

    bank = mel_filter_bank(num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=fmin,
                           max_frequency=fmax if fmax is not None else sr / 2, sampling_rate=sr, norm="slaney",
                           mel_scale="slaney")
    return bank.T.astype(np.float32)


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__["__voxgate_stub__"] = True
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def missing(attr: str) -> Any:
        raise AttributeError(f"{name}.{attr} is stubbed out for the parity tests")

    mod.__getattr__ = missing  # type: ignore[method-assign]
    return mod


def install_stubs() -> None:
    # transformers probes optional packages with find_spec when first imported: import it before any stub exists
    # so it records them as absent.
    import transformers
    import transformers.audio_utils  # noqa: F401

    absent = {n.split(".")[0] for n in STUBBED if n.split(".")[0] not in sys.modules
              and importlib.util.find_spec(n.split(".")[0]) is None}
    for name in STUBBED:
        if name.split(".")[0] in absent:  # a real installed module is used as is
            sys.modules.setdefault(name, _stub(name))
    librosa = sys.modules.get("librosa")
    if getattr(librosa, "__voxgate_stub__", False):
        filters = sys.modules["librosa.filters"]
        filters.__dict__["mel"] = _librosa_mel
        librosa.__dict__["filters"] = filters
    einops = sys.modules.get("einops")
    if getattr(einops, "__voxgate_stub__", False):
        einops.__dict__.update(rearrange=None, repeat=None)  # imported by name only (25 Hz tokenizer)
    if "torchaudio" in absent:
        sys.modules["torchaudio"].__dict__["compliance"] = sys.modules["torchaudio.compliance"]
        sys.modules["torchaudio.compliance"].__dict__["kaldi"] = sys.modules["torchaudio.compliance.kaldi"]


def import_reference() -> types.ModuleType:
    install_stubs()
    import qwen_tts.core.models.modeling_qwen3_tts as modeling

    return modeling


def reference_model(ckpt: Path, dtype: torch.dtype = torch.float32, device: str = "cpu",
                    attn: str = "eager") -> Any:
    """Reference Qwen3TTSForConditionalGeneration with our checkpoint's tensors (strict load)."""
    modeling = import_reference()
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig

    cfg = Qwen3TTSConfig(**json.loads((ckpt / "config.json").read_text()))
    cfg._attn_implementation = attn
    cfg.talker_config._attn_implementation = attn
    cfg.talker_config.code_predictor_config._attn_implementation = attn
    with torch.device(device):  # random init on the target device is fast; the checkpoint overwrites it
        model = modeling.Qwen3TTSForConditionalGeneration(cfg)
    model.load_state_dict(load_file(str(ckpt / "model.safetensors"), device=device), strict=True)
    return model.to(dtype).eval()


def reference_codec(ckpt: Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Any:
    import_reference()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2DecoderConfig
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder

    raw = json.loads((ckpt / "speech_tokenizer" / "config.json").read_text())["decoder_config"]
    cfg = Qwen3TTSTokenizerV2DecoderConfig(**raw)
    cfg._attn_implementation = "eager"
    with torch.device(device):
        decoder = Qwen3TTSTokenizerV2Decoder._from_config(cfg)
    state = load_file(str(ckpt / "speech_tokenizer" / "model.safetensors"), device=device)
    decoder.load_state_dict({k.removeprefix("decoder."): v for k, v in state.items() if k.startswith("decoder.")},
                            strict=True)
    return decoder.to(dtype).eval()


def reference_tokenizer(ckpt: Path, dtype: torch.dtype = torch.float32) -> Any:
    """The reference's whole 12 Hz tokenizer model (`Qwen3TTSTokenizerV2Model`: Mimi encoder + our decoder's
    counterpart) with the checkpoint's `speech_tokenizer/` tensors. A partial file without `decoder.*` (a real-shape
    encoder-only test) leaves the decoder uninitialised; every other key must load."""
    import_reference()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
    from transformers.modeling_utils import no_init_weights

    cfg = Qwen3TTSTokenizerV2Config(**json.loads((ckpt / "speech_tokenizer" / "config.json").read_text()))
    with no_init_weights():  # the checkpoint overwrites every weight; random init of 170M params takes seconds
        model = Qwen3TTSTokenizerV2Model(cfg)
    assert model.encoder.config._attn_implementation == "sdpa"  # what the reference's from_pretrained gets
    state = load_file(str(ckpt / "speech_tokenizer" / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("decoder.") for k in missing), (missing[:5], unexpected[:5])
    assert not missing or not any(k.startswith("decoder.") for k in state)
    return model.to(dtype).eval()


def reference_encode(tokenizer: Any, audio: np.ndarray, ckpt: Path) -> torch.Tensor:
    """codes [frames, 16] of one 24 kHz waveform the way `Qwen3TTSTokenizer.encode` takes it once the audio is at
    24 kHz: the checkpoint's feature extractor (`EncodecFeatureExtractor`), then `Qwen3TTSTokenizerV2Model.encode`."""
    from transformers import EncodecFeatureExtractor

    fe = EncodecFeatureExtractor.from_pretrained(str(ckpt / "speech_tokenizer"))
    inputs = fe(raw_audio=[np.asarray(audio, dtype=np.float32)], sampling_rate=fe.sampling_rate, return_tensors="pt")
    with torch.inference_mode():
        out = tokenizer.encode(inputs["input_values"].squeeze(1), inputs["padding_mask"].squeeze(1))
    return out.audio_codes[0]
