"""Prefill assembly for every mode and both text layouts (design §3, §4).

Strings are built and tokenized whole, as the reference does, then sliced: target `[3:-5]` is the content,
instruct is used whole, the ICL transcript is `[3:-2]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .config import Qwen3TTSConfig
from .talker import Talker
from .tokenizer import TextTokenizer


def target_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def ref_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


class PromptError(ValueError):
    """A request the checkpoint cannot serve (unknown speaker or language, missing instruct, ...)."""


REF_TOKENS_PER_S = 12.5  # one per 80 ms codec frame: over twice the fastest speech


def reference_ids(tokenizer: TextTokenizer, text: str, seconds: float) -> list[int]:
    """In-context cloning: the transcript's prompt ids (`ref_text(text)` tokenized), refused (PromptError) unless
    they fit the recording of `seconds`. The prompt pairs its tokens with the recording's frames; tokens past the
    frames spill into the streamed text of every request of the voice (RunnerConfig.max_trailing), and a long
    transcript leaves none: each request would be refused text_too_long. At most one token per frame, so that the
    transcript takes none of that room."""
    ids = tokenizer.encode(ref_text(text))
    tokens, frames = len(ids) - 5, int(seconds * REF_TOKENS_PER_S)  # (5: the role markers around the text)
    if tokens > frames:
        raise PromptError(f"ref_text is {tokens} tokens, more than its {seconds:.2f} s recording can hold: at most "
                          f"{frames} (one per 80 ms); send the recording's transcript only")
    return ids


@dataclass(slots=True)
class PromptInputs:
    """Token ids and conditioning for one utterance. `text_ids` tokenizes `target_text(...)` whole."""

    text_ids: list[int]
    language: str = "auto"
    speaker: str | None = None  # CustomVoice speaker name
    instruct_ids: list[int] | None = None  # tokenizes `instruct_text(...)` whole
    x_vector: torch.Tensor | None = None  # Base: [H] speaker-encoder output
    ref_ids: list[int] | None = None  # Base ICL: tokenizes `ref_text(...)` whole
    ref_codes: torch.Tensor | None = None  # Base ICL: [T_ref, 16]
    non_streaming: bool = True  # True: all text up front; False: one text token per frame


@dataclass(slots=True)
class Prompt:
    embeds: torch.Tensor  # [T, H] prefill rows
    trailing: torch.Tensor  # [R, H] text rows added to decode steps 0..R-1; tts_pad after
    tts_pad: torch.Tensor  # [H]
    ref_codes: torch.Tensor | None  # ICL: decoder context frames [T_ref, 16]


def language_id(cfg: Qwen3TTSConfig, language: str, speaker: str | None) -> int | None:
    lang = (language or "auto").lower()
    table = cfg.talker.codec_language_id
    if lang == "auto":
        lid = None
    elif lang in table:
        lid = table[lang]
    else:
        raise PromptError(f"language {language!r} is not supported; choose one of {cfg.languages}")
    if speaker and lang in ("chinese", "auto"):
        # Dialect speakers (eric, dylan) replace a Chinese or auto language with their dialect's id.
        dialect = cfg.talker.spk_is_dialect.get(speaker.lower(), False)
        if dialect is not False:
            lid = table[str(dialect)]
    return lid


def check_inputs(cfg: Qwen3TTSConfig, inp: PromptInputs) -> None:
    """What both prompt builders refuse: a truncated target string, a speaker and an x-vector at once, an unknown
    speaker."""
    if len(inp.text_ids) < 9:
        raise PromptError("text_ids must tokenize the whole target string (role, content, tail)")
    if inp.speaker:
        if inp.x_vector is not None:
            raise PromptError("give either a speaker or an x-vector, not both")
        if inp.speaker.lower() not in cfg.talker.spk_id:
            raise PromptError(f"speaker {inp.speaker!r} is not supported; choose one of {cfg.speakers}")


@torch.inference_mode()
def build_prompt(talker: Talker, cfg: Qwen3TTSConfig, inp: PromptInputs) -> Prompt:
    tc = cfg.talker
    p = next(talker.parameters())
    ids = lambda xs: torch.tensor(xs, dtype=torch.long, device=p.device)  # noqa: E731
    T, C = talker.text_embed, talker.codec_embed
    tts_bos, tts_eos, tts_pad = T(ids([cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]))

    check_inputs(cfg, inp)
    if inp.speaker:
        speaker_rows = [C(ids(tc.spk_id[inp.speaker.lower()]))]
    elif inp.x_vector is not None:
        speaker_rows = [inp.x_vector.to(device=p.device, dtype=p.dtype)]
    else:
        speaker_rows = []

    lid = language_id(cfg, inp.language, inp.speaker)
    prefix = ([tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id] if lid is None
              else [tc.codec_think_id, tc.codec_think_bos_id, lid, tc.codec_think_eos_id])
    tail = C(ids([tc.codec_pad_id, tc.codec_bos_id]))
    codec_rows = torch.cat([C(ids(prefix)), *(r[None] for r in speaker_rows), tail])
    n = codec_rows.shape[0]
    # Control block: n-1 rows, tts_pad on all but the last, which carries tts_bos (its codec row is codec_pad).
    text_side = torch.cat([tts_pad[None].expand(n - 2, -1), tts_bos[None]])
    segments = []
    if inp.instruct_ids is not None:
        segments.append(T(ids(inp.instruct_ids)))
    text = inp.text_ids
    segments += [T(ids(text[:3])), text_side + codec_rows[:-1]]

    content = text[3:-5]
    empty = tts_pad[:0]
    ref_codes = None
    if inp.ref_codes is not None:
        if inp.ref_ids is None:
            raise PromptError("in-context cloning needs the reference transcript")
        ref_codes = inp.ref_codes.to(device=p.device, dtype=torch.long)
        x_rows = torch.cat([T(ids(inp.ref_ids[3:-2] + content)), tts_eos[None]])
        y_rows = torch.cat([C(ids([tc.codec_bos_id])), talker.frame_embed(ref_codes)])
        if inp.non_streaming:
            segments += [x_rows + C(ids([tc.codec_pad_id] * len(x_rows))), y_rows + tts_pad]
            trailing = empty
        elif len(x_rows) > len(y_rows):
            segments.append(x_rows[: len(y_rows)] + y_rows)
            trailing = x_rows[len(y_rows):]
        else:
            pad = tts_pad[None].expand(len(y_rows) - len(x_rows), -1)
            segments.append(torch.cat([x_rows, pad]) + y_rows)
            trailing = empty
    elif inp.non_streaming:
        rows = torch.cat([T(ids(content)), tts_eos[None]])
        segments += [rows + C(ids([tc.codec_pad_id] * len(rows))), (tts_pad + codec_rows[-1])[None]]
        trailing = empty
    else:
        segments.append(T(ids(text[3:4])) + codec_rows[-1])
        trailing = torch.cat([T(ids(text[4:-5])), tts_eos[None]])
    return Prompt(embeds=torch.cat(segments), trailing=trailing, tts_pad=tts_pad, ref_codes=ref_codes)


NO_ID = -1  # a row without this term
XVEC = -2  # the codec column-0 marker of the speaker row of a Base prompt: the stream's x-vector goes there


@dataclass(slots=True)
class PromptRows:
    """A prompt as token ids, for the batched engine (its step embeds them inside a captured graph).

    Row i's embedding is T(text[i]) + sum_k table_k(codec[i, k]) (+ the x-vector where codec[i, 0] == XVEC), with
    table_0 the Talker's codec table and table_k (k >= 1) the code predictor's k-th embedding; NO_ID terms are
    absent. It is `build_prompt`'s `embeds` row for row. `trailing` are the text ids added to decode steps 0, 1, ...
    (tts_pad after them).
    """

    text: np.ndarray  # [T] int64
    codec: np.ndarray  # [T, Q] int64
    trailing: list[int]
    x_vector: torch.Tensor | None = None  # [H]
    ref_codes: torch.Tensor | None = None  # ICL: frames that warm the codec state [T_ref, Q]

    def __len__(self) -> int:
        return int(self.text.shape[0])


def prompt_rows(cfg: Qwen3TTSConfig, inp: PromptInputs) -> PromptRows:
    """`build_prompt` as ids (same validation, same rows): see PromptRows."""
    tc = cfg.talker
    q = tc.num_code_groups
    check_inputs(cfg, inp)
    if inp.speaker:
        speaker = [tc.spk_id[inp.speaker.lower()]]
    elif inp.x_vector is not None:
        speaker = [XVEC]
    else:
        speaker = []
    lid = language_id(cfg, inp.language, inp.speaker)
    prefix = ([tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id] if lid is None
              else [tc.codec_think_id, tc.codec_think_bos_id, lid, tc.codec_think_eos_id])
    codec_ids = [*prefix, *speaker, tc.codec_pad_id, tc.codec_bos_id]
    n = len(codec_ids)
    pad, bos, eos = cfg.tts_pad_token_id, cfg.tts_bos_token_id, cfg.tts_eos_token_id
    text: list[int] = []
    codec: list[list[int]] = []

    def row(t: int, c: list[int] | int | None = None) -> None:
        text.append(t)
        frame = [NO_ID] * q
        if isinstance(c, int):
            frame[0] = c
        elif c is not None:
            frame = list(c)
        codec.append(frame)

    for t in inp.instruct_ids or []:
        row(t)
    ids = inp.text_ids
    for t in ids[:3]:
        row(t)
    for i in range(n - 1):  # control block: tts_pad on all but the last row, which carries tts_bos
        row(bos if i == n - 2 else pad, codec_ids[i])
    content = ids[3:-5]
    trailing: list[int] = []
    ref_codes = None
    if inp.ref_codes is not None:
        if inp.ref_ids is None:
            raise PromptError("in-context cloning needs the reference transcript")
        ref_codes = inp.ref_codes.to(dtype=torch.long)
        frames = ref_codes.tolist()
        x = [*inp.ref_ids[3:-2], *content, eos]
        y: list[list[int] | int] = [tc.codec_bos_id, *frames]
        if inp.non_streaming:
            for t in x:
                row(t, tc.codec_pad_id)
            for c in y:
                row(pad, c)
        elif len(x) > len(y):
            for t, c in zip(x, y, strict=False):
                row(t, c)
            trailing = x[len(y):]
        else:
            for j, c in enumerate(y):
                row(x[j] if j < len(x) else pad, c)
    elif inp.non_streaming:
        for t in [*content, eos]:
            row(t, tc.codec_pad_id)
        row(pad, codec_ids[-1])
    else:
        row(ids[3], codec_ids[-1])
        trailing = [*ids[4:-5], eos]
    return PromptRows(np.asarray(text, dtype=np.int64), np.asarray(codec, dtype=np.int64), trailing,
                      inp.x_vector, ref_codes)
