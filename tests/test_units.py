"""Unit tests of the gateway's small parts: header, framing, text cutting, pacer, simulated player, stalls."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from voxgate.client.player import SimulatedPlayer
from voxgate.engine.fake import FakeEngine
from voxgate.gateway.audio.frames import (
    OPUS_SWITCH_INTERVAL_S,
    AudioFormat,
    configure_opus_pool,
    make_encoder,
    mulaw_decode,
    mulaw_encode,
)
from voxgate.gateway.config import GatewayConfig, load_config
from voxgate.gateway.protocol import FLAG_FIRST, FLAG_LAST, FrameHeader, ProtocolError
from voxgate.gateway.session.context import Context
from voxgate.gateway.session.pacer import Pacer
from voxgate.gateway.session.stalls import FrameLog, FrameRecord
from voxgate.gateway.session.text_split import TextSegmenter


@given(st.integers(0, 255), st.integers(0, 0xFFFF), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
       st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 2**64 - 1))
def test_header_round_trip(codec, flags, ctx, seq, track, samples, pts):
    header = FrameHeader(codec, flags, ctx, seq, track, samples, pts)
    packed = header.pack()
    assert len(packed) == 24
    assert FrameHeader.unpack(packed + b"payload") == header


def test_header_layout_is_little_endian_as_documented():
    packed = FrameHeader(1, 0x0009, 7, 0x01020304, 2, 960, 2**40 + 5).pack()
    assert packed[0] == 1 and packed[1] == 1 and packed[2:4] == b"\x09\x00"
    assert packed[4:8] == (7).to_bytes(4, "little") and packed[8:12] == bytes([4, 3, 2, 1])
    assert packed[12:14] == (2).to_bytes(2, "little") and packed[14:16] == (960).to_bytes(2, "little")
    assert packed[16:24] == (2**40 + 5).to_bytes(8, "little")


@pytest.mark.parametrize("chunks", [[1000, 7, 3000, 480], [480] * 5, [1], [12345]])
def test_pcm_framer_cuts_exactly(chunks):
    rng = np.random.default_rng(0)
    enc = make_encoder(AudioFormat())
    audio = [rng.integers(-30000, 30000, n).astype(np.int16) for n in chunks]
    frames = [f for a in audio for f in enc.push(a)] + enc.cut()
    assert all(f.samples == 480 for f in frames[:-1])
    assert np.array_equal(np.frombuffer(b"".join(f.payload for f in frames), "<i2"), np.concatenate(audio))


def test_opus_cut_makes_all_audio_decodable():
    import opuslib

    fmt = AudioFormat.negotiate({"codec": "opus"})
    enc = make_encoder(fmt)
    tone = (8000 * np.sin(2 * np.pi * 440 * np.arange(24000 * 2 + 77) / 24000)).astype(np.int16)
    frames = enc.push(tone[:10000]) + enc.cut() + enc.push(tone[10000:]) + enc.cut() + enc.cut()
    decoder = opuslib.Decoder(48000, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(f.payload, 960), np.int16) for f in frames])
    assert sum(f.samples for f in frames) == len(decoded) - fmt.opus_pre_skip
    assert len(decoded) - fmt.opus_pre_skip >= 2 * len(tone)
    assert frames[0].samples == 960 - 312


def test_opus_without_libopus_is_a_clear_refusal(monkeypatch):
    """opuslib raises a bare Exception at import where libopus is missing: the client gets `unsupported` naming
    libopus and the other codecs, not `internal_error`."""
    import sys

    monkeypatch.setitem(sys.modules, "opuslib", None)  # the import now fails as it does without libopus
    fmt = AudioFormat(codec="opus", sample_rate=48000, frame_ms=20, bitrate=64000)
    with pytest.raises(ProtocolError) as info:
        make_encoder(fmt)
    assert info.value.code == "unsupported" and "libopus" in info.value.message and "pcm_s16le" in info.value.message


@pytest.mark.parametrize("audio,error", [({"codec": "flac"}, "codec"), ({"codec": "opus", "sample_rate": 24000},
                                         "48000"), ({"sample_rate": 11025}, "sample_rate"), ({"frame_ms": 25},
                                         "frame_ms"), ({"channels": 2}, "mono")])
def test_audio_negotiation_refuses_clearly(audio, error):
    with pytest.raises(ProtocolError, match=error) as exc:
        AudioFormat.negotiate(audio)
    assert exc.value.code == "unsupported"


@pytest.mark.parametrize("before_ms", [5.0, 0.1])
def test_opus_pool_shortens_the_switch_interval_and_never_lengthens_it(before_ms):
    """The engine loop starts before the pool is configured: a shorter interval it set (gil_switch_ms) stays."""
    saved = sys.getswitchinterval()
    try:
        sys.setswitchinterval(before_ms / 1000)
        configure_opus_pool(1)
        assert sys.getswitchinterval() == pytest.approx(min(before_ms / 1000, OPUS_SWITCH_INTERVAL_S))
    finally:
        configure_opus_pool(0)
        sys.setswitchinterval(saved)


def test_mulaw_round_trip_within_quantization():
    x = np.arange(-32000, 32000, 13).astype(np.int16)
    y = mulaw_decode(mulaw_encode(x))
    assert np.all(np.abs(y.astype(int) - x) <= np.maximum(8, np.abs(x.astype(int)) // 16))


@pytest.mark.parametrize("pieces,expected", [
    (["Hello world. How are", " you? Fine"], ["Hello world.", "How are you?"]),
    (["Pi is 3.14 exactly. Yes"], ["Pi is 3.14 exactly."]),
    (["no end yet"], []),
    (["line one\nline two\n"], ["line one", "line two"]),
    (["她说。好的！"], []),
])
def test_segmenter_cuts_at_sentence_ends(pieces, expected):
    seg = TextSegmenter()
    out = [s for p in pieces for s in seg.append(p)]
    assert out == expected


def test_segmenter_flush_and_long_runs():
    seg = TextSegmenter(max_segment_chars=20)
    out = seg.append("aaaa bbbb cccc dddd eeee ffff")
    assert out == ["aaaa bbbb cccc dddd"] and seg.flush() == ["eeee ffff"] and seg.buffered_chars == 0


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Timeline:
    """What a Track is to its pacer: the position."""

    def __init__(self) -> None:
        self.pts = 0


def send(pacer: Pacer, samples: int) -> None:
    pacer.before_send()
    pacer.timeline.pts += samples


def test_pacer_client_clock():
    clock = Clock()
    timeline = Timeline()  # the pacer holds its track weakly
    pacer = Pacer("client_clock", 24000, 150, 1000, 50, timeline, clock=clock)
    assert pacer.allowance() == 3600  # a burst of the target at the start
    send(pacer, 3600)
    assert pacer.allowance() == 0
    pacer.on_report(played_pts=0, buffered_samples=3600)  # preroll done, playing
    clock.t += 0.05
    assert pacer.allowance() == 1200  # 50 ms played since the report
    pacer.on_report(played_pts=3600, buffered_samples=0)  # ran dry: not advancing
    clock.t += 1.0
    assert pacer.estimated_played() == 3600 and pacer.allowance() == 3600
    pacer.grow_target()
    assert pacer.target_ms == 200
    for _ in range(40):
        pacer.grow_target()
    assert pacer.target_ms == 1000


def test_pacer_realtime_and_asap():
    clock = Clock()
    timeline = Timeline()
    pacer = Pacer("realtime", 24000, 200, 1000, 50, timeline, clock=clock)
    send(pacer, 4800)
    clock.t += 0.1
    assert pacer.estimated_played() == 2400 and pacer.allowance() == 2400
    clock.t += 1.0  # nothing sent for a second: the clock stops at what was sent
    assert pacer.estimated_played() == 4800
    assert Pacer("asap", 24000, 150, 1000, 50, timeline).allowance() is None


def test_simulated_player_counts_stalls_but_not_boundaries():
    clock = Clock()
    player = SimulatedPlayer(1000, preroll=100, clock=clock)
    player.on_frame(0, 100, FLAG_FIRST)  # preroll reached: plays from t=100.0
    clock.t += 0.15  # ran dry at 100.1
    player.on_frame(100, 100, 0)  # arrives 50 ms late: one stall
    assert [round(s.duration_s, 3) for s in player.stalls] == [0.05]
    clock.t += 0.1
    player.on_frame(200, 50, FLAG_LAST)  # arrives exactly when needed
    clock.t += 1.0  # dry at the context's end: not a stall
    assert player.position() == 250 and len(player.stalls) == 1
    player.on_frame(250, 20, FLAG_FIRST)  # a new context prerolls again (20 < 100 buffered): waits
    assert not player.playing
    report = player.report()
    assert report["underruns"] == {"events": 1, "samples": 50, "max_gap_ms": 50.0}


def test_simulated_player_an_empty_last_frame_turns_running_dry_into_an_end():
    clock = Clock()
    player = SimulatedPlayer(1000, preroll=100, clock=clock)
    player.on_frame(0, 100, FLAG_FIRST)
    clock.t += 0.3  # dry at 100.1: the end was not known yet
    player.on_frame(100, 0, FLAG_LAST)  # the context's end, after its audio (an empty frame)
    clock.t += 0.5
    player.on_frame(100, 200, FLAG_FIRST)  # the next context: nothing in between was a stall
    assert player.stalls == [] and player.report()["underruns"]["events"] == 0


async def test_simulated_player_drained_returns_once_everything_received_has_played():
    player = SimulatedPlayer(1000, preroll=10)  # the real clock: drained() sleeps the buffered time, no more
    await player.drained()  # nothing received: at once
    player.on_frame(0, 30, FLAG_FIRST | FLAG_LAST)
    assert player.buffered() > 0
    await player.drained()
    assert player.position() == player.received_end and player.buffered() == 0 and not player.stalls


def test_stall_attribution():
    log = FrameLog()
    log.record(FrameRecord(0, 480, ready_at=1.0, sent_at=1.0))
    log.record(FrameRecord(480, 480, ready_at=2.0, sent_at=2.0))  # ready late
    log.record(FrameRecord(960, 480, ready_at=1.0, sent_at=3.0))  # ready early, sent late
    assert log.attribute(500, needed_at=1.5, audio_ready=False) == "generation"
    assert log.attribute(1000, needed_at=2.5, audio_ready=False) == "pacing"
    assert log.attribute(10, needed_at=1.5, audio_ready=False) == "network"
    assert log.attribute(5000, needed_at=9.0, audio_ready=True) == "pacing"
    assert log.attribute(5000, needed_at=9.0, audio_ready=False) == "generation"
    log.rewind(960)
    assert log.find(1000) is None


def test_config_presets_and_unknown_keys(tmp_path):
    assert load_config("default") == GatewayConfig()
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = 'espeak'\n[limits]\nmax_contxts = 3\n")
    with pytest.raises(ValueError, match="max_contxts"):
        load_config(bad)
    with pytest.raises(FileNotFoundError, match="presets"):
        load_config("no-such-preset")
    with pytest.raises(ValueError, match=r"pacing\.mode"):
        load_config("default", pacing={"mode": "warp"})


@pytest.mark.slow
async def test_synthesis_stops_when_nobody_sends():
    engine = FakeEngine(device_rtf=1000, chunk_ms=100)
    await engine.start()
    context = Context("c", 1, 0, None, None, None, 24000 * 600, False, make_encoder(AudioFormat()))
    context.max_ahead_samples = 24000 * 2
    task = asyncio.create_task(context.produce(engine, lambda: None, lambda *a: None))
    context.append_text("word " * 100 + ".")  # 37 s of audio
    context.end()
    await asyncio.sleep(0.3)
    assert 24000 * 2 <= context.ready_samples <= 24000 * 2 + 2400  # paused at the cap (plus one chunk)
    while not context.produced_all or context.frames:  # a sender drains: production resumes to the end
        if context.frames:
            context.pop()
        await asyncio.sleep(0.0005)
    await asyncio.wait_for(task, 5)
    assert context.produced_samples == round(101 * 0.37 * 24000)


def test_pacer_sleeps_until_the_buffer_drains_instead_of_polling():
    clock = Clock()
    timeline = Timeline()  # the pacer holds its track weakly
    pacer = Pacer("client_clock", 24000, 150, 1000, 50, timeline, clock=clock)
    send(pacer, 4800)  # 200 ms sent, nothing played yet
    pacer.on_report(played_pts=0, buffered_samples=4800)  # playing
    assert pacer.seconds_until_allowed(1) == pytest.approx((4800 - 3600 + 1) / 24000)
    pacer.on_report(played_pts=0, buffered_samples=0)  # stuck: only a report can move the estimate
    pacer.on_report(played_pts=0, buffered_samples=0)
    assert pacer.seconds_until_allowed(1) == pytest.approx(0.05)


def test_gc_tuning_freezes_raises_the_threshold_measures_and_undoes():
    import gc

    from voxgate.gateway.transport.gc_tuning import GcTuning

    pauses: list[tuple[int, float, int]] = []
    before = gc.get_threshold()
    tuning = GcTuning(12_345, True, lambda gen, s, n: pauses.append((gen, s, n)))
    tuning.apply()
    try:
        assert gc.get_threshold()[0] == 12_345 and gc.get_freeze_count() > 0
        cycles = []
        for _ in range(100):  # garbage only a collection frees: 100 lists that hold themselves
            cycle: list = []
            cycle.append(cycle)
            cycles.append(cycle)
        del cycles, cycle
        gc.collect(0)
        assert pauses and pauses[-1][0] == 0 and pauses[-1][1] >= 0 and pauses[-1][2] >= 100
    finally:
        tuning.undo()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_fake_audio_period_table_equals_the_formula_on_random_spans():
    from voxgate.engine.fake import fake_audio, fake_audio_ref

    rng = np.random.default_rng()
    for _ in range(10):
        text, voice = str(rng.integers(0, 10**9)), str(rng.choice(["tone-a", "tone-b"]))
        offset, n = int(rng.integers(0, 10**7)), int(rng.integers(1, 5000))
        assert np.array_equal(fake_audio(text, voice, n, offset), fake_audio_ref(text, voice, n, offset))
    assert np.array_equal(fake_audio("t", "tone-a", 100_000, 47_000), fake_audio_ref("t", "tone-a", 100_000, 47_000))
