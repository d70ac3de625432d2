"""The batched engine loop against each stream alone: rows never leak into each other.

Streams join at different steps, use different chunk widths and text layouts, finish on their budgets or are
cancelled, and share steps with prompts being prefilled; each stream's codes and audio must be what the eager
batch-1 path gives it alone (greedy, fp32, CPU), and teacher-forced, its logits at every step must match.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from voxgate.engine.qwen3tts.model.generate import Qwen3TTS
from voxgate.engine.qwen3tts.tools.wav import to_int16

from .loop_support import Stream, drive, make_runner, solo_codes, solo_logits

TEXTS = ["Hello there.", "A second, longer sentence with more words in it.", "Third.", "Fourth one here, please.",
         "Numbers like 42 and 7 too.", "Short.", "The quick brown fox jumps over the lazy dog.", "Why not?",
         "Streaming, word by word, like an agent.", "Twelve.", "One more for luck.", "And the last one."]
SPEAKERS = ["ryan", "aiden", "vivian", "serena"]
SCHEDULES = [(1,), (3,), (1, 2, 4), (4, 8, 16), (2, 5), (16,)]


@pytest.fixture(scope="module")
def tts(tiny_ckpt: Callable[[str], Path]) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_ckpt("cv17"), dtype=torch.float32, progress=False)


def _streams(n: int, seed: int) -> list[Stream]:
    rng = np.random.default_rng(seed)
    return [Stream(TEXTS[i % len(TEXTS)], budget=int(rng.integers(6, 22)), join_step=int(rng.integers(0, 14)),
                   speaker=SPEAKERS[i % len(SPEAKERS)], non_streaming=bool(i % 3), schedule=SCHEDULES[i % 6])
            for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"codec_buckets": ((1, 4), (4, 4), (16, 4)), "draw": "kernel",
                                          "epilogue": "kernel", "text_table": "table"},
                                     {"depth": "fused"}, {"depth": "persistent"}],
                         ids=["mixed-widths", "pieces-of-4-draw-kernel", "fused-depth", "persistent-depth"])
def test_free_running_greedy_codes_equal_each_stream_alone(tts: Qwen3TTS, options: dict[str, Any]) -> None:
    """Pieces of 4: chunks of 8 and 16 frames are decoded over several calls and handed over whole, with every
    codebook's pick through kernels/sample_draw.py's reference on the layers' depth loop (what draw=auto takes on
    CUDA), and each step's ring entries and next inputs through kernels/frame_epilogue.py's reference with the text
    rows from the projected table (what epilogue=auto and text_table=auto take on CUDA). Fused depth: the depth
    loop's passes 1..14 on the fused kernels' references (depth_fused.py); persistent depth: on the persistent
    pass's reference (kernels/depth_pass.py) at every bucket (all <= 16 rows here; the kernel itself, one phase a
    launch, runs the depth loop in test_depth_kernels.py)."""
    streams = _streams(13, seed=1)
    streams[4].cancel_step = streams[4].join_step + 5  # cancelled mid-stream: the others must not notice
    runner = make_runner(tts, **options)
    assert (runner.model.draw is not None) == (options.get("draw") == "kernel"
                                               or options.get("depth") in ("fused", "persistent"))
    assert (runner.model.persistent_depth is not None) == (options.get("depth") == "persistent")
    assert (runner.model.epilogue is not None) == (runner.model.text_table is not None) == ("epilogue" in options)
    recorder = drive(tts, runner, streams)
    assert max(recorder.rows_per_step) >= 8, recorder.rows_per_step  # streams really shared steps
    for s in streams:
        codes = np.stack(recorder.codes[s.codes_id])
        alone = solo_codes(tts, s)
        if s.cancel_step is not None:
            np.testing.assert_array_equal(codes, alone[: len(codes)])
            continue
        np.testing.assert_array_equal(codes, alone)
        # audio: the chunks (of this stream's widths) against one whole decode of its codes, within 1 LSB
        audio = np.concatenate(s.audio)
        whole = to_int16(tts.decode(torch.as_tensor(alone)))
        assert audio.shape == whole.shape
        assert np.abs(audio.astype(np.int32) - whole).max() <= 1
        widths = [len(a) // 1920 for a in s.audio]
        expect = [s.schedule[min(i, len(s.schedule) - 1)] for i in range(len(widths) - 1)]
        assert widths[:-1] == expect and 0 < widths[-1] <= s.schedule[min(len(widths) - 1, len(s.schedule) - 1)]
    # every slot came back: no leak on finish or cancel
    assert runner.kv.num_free == runner.kv.max_streams


def _rel_close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> float:
    """Max |got - want| over max |want| on the finite entries; the -inf (masked) entries must match exactly."""
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    return float((got[finite] - want[finite]).abs().max() / want[finite].abs().max())


@pytest.mark.slow
def test_teacher_forced_logits_equal_each_stream_alone(tts: Qwen3TTS) -> None:
    streams = _streams(6, seed=2)
    streams[2].cancel_step = streams[2].join_step + 4
    # the codes each stream is forced along: its own greedy codes alone
    alone = {id(s): solo_codes(tts, s) for s in streams}
    runner = make_runner(tts, record_logits=True)
    recorder = drive(tts, runner, streams, greedy=False, forced=lambda s: alone[id(s)])
    worst = 0.0
    for s in streams:
        got = recorder.logits[s.codes_id]
        want = solo_logits(tts, s, alone[id(s)][: len(got)])
        assert len(got) == len(want) and len(got) > 0
        for frame_got, frame_want in zip(got, want, strict=True):
            assert len(frame_got) == 16
            for g, w in zip(frame_got, frame_want, strict=True):
                worst = max(worst, _rel_close(g, w, 1e-4))
        # sampled (not greedy) yet forced: the stream made exactly the forced frames
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), alone[id(s)][: len(got)])
    assert worst < 1e-4, worst


@pytest.mark.slow
def test_rows_beyond_max_rows_wait_by_deadline(tts: Qwen3TTS) -> None:
    """More streams than rows: every step is full, every stream still finishes with its own codes."""
    streams = [Stream(TEXTS[i], budget=8, join_step=0, speaker=SPEAKERS[i % 4]) for i in range(6)]
    runner = make_runner(tts)
    recorder = drive(tts, runner, streams, max_rows=4)
    assert max(recorder.rows_per_step) == 4
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(tts, s))


@pytest.mark.slow
def test_admission_waits_for_a_slot(tts: Qwen3TTS) -> None:
    """Three usable slots, five streams: the last two wait for slots (never fail) and run when some free."""
    streams = [Stream(TEXTS[i], budget=5, join_step=0) for i in range(5)]
    runner = make_runner(tts, num_slots=4)
    recorder = drive(tts, runner, streams)
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(tts, s))
    assert runner.kv.num_free == 3


@pytest.mark.slow
def test_long_prompt_is_prefilled_over_several_steps(tts: Qwen3TTS) -> None:
    text = " ".join(TEXTS)  # ~90 tokens: two 64-token pieces riding decode steps of another stream
    streams = [Stream("Hello.", budget=12, join_step=0), Stream(text, budget=6, join_step=2)]
    runner = make_runner(tts, max_positions=400)
    recorder = drive(tts, runner, streams)
    assert streams[1].request is not None and streams[1].request.num_prompt_tokens > 64
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(tts, s))


@pytest.mark.slow
def test_prompt_rows_embed_like_build_prompt(tiny_ckpt: Callable[[str], Path], ours: Callable[[str], Any]) -> None:
    """Every prompt layout as ids, embedded in the step's way, equals build_prompt's rows."""
    from voxgate.engine.qwen3tts.batch_step import embed_rows
    from voxgate.engine.qwen3tts.model.generate import Voice
    from voxgate.engine.qwen3tts.model.prompt import prompt_rows

    cases = [("cv17", "ryan", None, None), ("cv17", "eric", "auto", "Sad."), ("vd17", None, "english", "Warm."),
             ("base17", "xvec", "english", None), ("base17", "icl", "auto", None), ("base17", "icl-stream", None, None)]
    for kind, voice, language, instruct in cases:
        tts = ours(kind)
        h = tts.cfg.talker.layers.hidden_size
        non_streaming = None
        if voice in ("xvec", "icl", "icl-stream"):
            xv = torch.randn(h)
            codes = torch.randint(0, 2048, (5 if voice == "icl" else 40, 16))
            v: Any = Voice(x_vector=xv, ref_text="Reference words." if voice != "xvec" else None,
                           ref_codes=codes if voice != "xvec" else None)
            non_streaming = voice == "icl"
        else:
            v = voice
        for text in ("Hi.", "A much longer sentence, with enough words to outnumber the reference frames."):
            inputs = tts.prompt_inputs(text, v, language, instruct, non_streaming)
            want = tts.build(inputs)
            rows = prompt_rows(tts.cfg, inputs)
            xvec = (inputs.x_vector if inputs.x_vector is not None else torch.zeros(h)).expand(len(rows), -1)
            with torch.inference_mode():
                got = embed_rows(tts.talker, torch.as_tensor(rows.text), torch.as_tensor(rows.codec), xvec)
            torch.testing.assert_close(got, want.embeds, rtol=1e-5, atol=1e-6)
            trailing = tts.talker.text_embed(torch.as_tensor(rows.trailing, dtype=torch.long)) if rows.trailing \
                else want.trailing
            torch.testing.assert_close(trailing, want.trailing, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_in_context_clone_streams_equal_the_whole_decode(tiny_ckpt: Callable[[str], Path]) -> None:
    """Base, in-context: the reference frames warm the codec state at the stream's first chunk (on the codec's own
    stream on CUDA), the prompt carries the x-vector and the reference's frames; codes and audio as alone. A third
    stream of the first voice starts from the kept warm state (a copy of one slot row), with the same result."""
    from voxgate.engine.core import EngineCore
    from voxgate.engine.qwen3tts.model.generate import Voice
    from voxgate.engine.qwen3tts.model.prompt import prompt_rows
    from voxgate.engine.qwen3tts.model.sampling import param_row
    from voxgate.engine.request import Request
    from voxgate.engine.scheduler import SchedulerConfig

    from .loop_support import RecordingRunner

    base = Qwen3TTS.from_pretrained(tiny_ckpt("base17"), dtype=torch.float32, progress=False)
    h = base.cfg.talker.layers.hidden_size
    gen = base.cfg.generation.greedy()
    runner = make_runner(base)
    warms = []
    codec_warm = runner.chunks.codec.warm
    runner.chunks.codec.warm = lambda *args: (warms.append(args[1].shape), codec_warm(*args))
    recorder = RecordingRunner(runner)
    core = EngineCore(recorder, runner.kv, SchedulerConfig(max_rows=4, max_prefill_tokens=64, urgent_s=0))
    cases = []
    voices = [Voice(x_vector=torch.randn(h), ref_text="Some reference words.",
                    ref_codes=torch.randint(0, 2048, (frames, 16))) for frames in (6, 30)]
    for i, (text, voice) in enumerate([("Cloned speech, first.", voices[0]), ("Second clone.", voices[1]),
                                       ("The first voice again.", voices[0])]):
        inputs = base.prompt_inputs(text, voice, "english")
        rows = prompt_rows(base.cfg, inputs)
        request = Request(rows, len(rows), 9 + i, (2, 4), param_row(gen))
        core.add(request)
        cases.append((request, inputs, []))
    while core.has_work:
        for request, pcm in core.step().chunks:
            next(c for c in cases if c[0] is request)[2].append(pcm)
    assert len(warms) == 2 and len(runner.chunks._warmed) == 2  # the third stream copied the first voice's state
    for request, inputs, audio in cases:
        prompt = base.build(inputs)
        alone = base.generate_codes(prompt, gen, request.frame_budget)
        np.testing.assert_array_equal(np.stack(recorder.codes[request.request_id]), alone.numpy())
        whole = to_int16(base.decode(alone, prompt.ref_codes))
        assert np.abs(np.concatenate(audio).astype(np.int32) - whole).max() <= 1


@pytest.mark.slow
@pytest.mark.parametrize("pipeline_min_rows", [4, 0], ids=["read-at-once", "pipelined"])
def test_a_streams_first_frame_comes_out_of_the_step_that_completes_its_prompt(tts: Qwen3TTS,
                                                                              pipeline_min_rows: int) -> None:
    """One step from submission to the first frame for a prompt that fits a step (two for one over two steps):
    the step that completes a prompt samples from its last token's output. Pipelined, that step is read with the
    next one, but the frame is still its own."""
    from voxgate.engine.core import EngineCore
    from voxgate.engine.qwen3tts.model.prompt import prompt_rows
    from voxgate.engine.qwen3tts.model.sampling import param_row
    from voxgate.engine.request import Request
    from voxgate.engine.scheduler import SchedulerConfig

    from .loop_support import RecordingRunner

    runner = make_runner(tts, max_positions=400)
    gen = tts.cfg.generation.greedy()
    for text, pieces in (("Hello there.", 1), (" ".join(TEXTS), 2)):
        s = Stream(text, budget=4, join_step=0)
        recorder = RecordingRunner(runner)
        core = EngineCore(recorder, runner.kv, SchedulerConfig(max_rows=4, max_prefill_tokens=64, urgent_s=0),
                          pipeline_min_rows=pipeline_min_rows)
        rows = prompt_rows(tts.cfg, tts.prompt_inputs(s.text, s.speaker, "english", non_streaming=True))
        request = Request(rows, len(rows), s.budget, s.schedule, param_row(gen))
        assert (len(rows) > 64) == (pieces == 2)
        core.add(request)
        steps = 0
        while request.num_frames == 0:
            core.step()
            steps += 1
        assert recorder.make_up[pieces - 1] == (0, 1, 0)  # its prompt's last piece, no decode row: it made frame 0
        assert recorder.sampled_per_step[pieces - 1] == [request.request_id]
        assert steps == len(recorder.make_up) == pieces + (1 if pipeline_min_rows == 0 else 0)  # pipelined: read late
        while core.has_work:
            core.step()
        np.testing.assert_array_equal(np.stack(recorder.codes[request.request_id]), solo_codes(tts, s))


@pytest.mark.slow
def test_steps_mixing_decodes_completed_prompts_and_prompt_pieces_equal_each_stream_alone(tts: Qwen3TTS) -> None:
    """Steps that carry decode rows, prompts completed (each sampling its first frame) and pieces of prompts still
    going at once: every stream's codes are its own alone."""
    long = " ".join(TEXTS)  # ~90 tokens: two pieces of at most 64
    streams = [Stream("Hello there.", budget=14, join_step=0), Stream(long, budget=8, join_step=2),
               Stream("Third.", budget=9, join_step=3), Stream(" ".join(reversed(TEXTS)), budget=7, join_step=3),
               Stream("Why not?", budget=10, join_step=4, speaker="vivian")]
    runner = make_runner(tts, max_positions=400)
    recorder = drive(tts, runner, streams, max_rows=4)
    assert any(d and c and p for d, c, p in recorder.make_up), recorder.make_up
    for s in streams:
        np.testing.assert_array_equal(np.stack(recorder.codes[s.codes_id]), solo_codes(tts, s))
