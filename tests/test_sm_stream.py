"""engine/sm_stream.py: a stream whose kernels run on only some SMs (a CUDA green context), and the option that asks
for one (codec_sms)."""

import gc
import subprocess
import sys
import weakref

import pytest
import torch
from voxgate.engine.qwen3tts.options import Qwen3TTSOptions
from voxgate.engine.sm_stream import _keep_for_the_process, sm_limited_stream


def test_codec_sms_reaches_the_runner_and_below_zero_is_refused() -> None:
    from voxgate.engine.qwen3tts.runner_config import RunnerConfig

    assert Qwen3TTSOptions().runner_options()["codec_sms"] == 0
    config = RunnerConfig(**Qwen3TTSOptions(codec_sms=24, codec_sms_rows=8).runner_options())
    assert (config.codec_sms, config.codec_sms_rows) == (24, 8)
    for bad in ({"codec_sms": -1}, {"codec_sms_rows": -1}):
        with pytest.raises(ValueError, match="codec_sms and codec_sms_rows must be >= 0"):
            Qwen3TTSOptions(**bad)


def test_codec_calls_up_to_codec_sms_rows_take_the_limited_lane() -> None:
    """ChunkDecoder.lane: with a limited lane, calls of at most sms_rows rows run there (all of them with 0), wider
    ones on the plain stream; without one (no codec_sms, or no CUDA) every call is plain."""
    from voxgate.engine.graphs import GraphSet
    from voxgate.engine.qwen3tts.chunk_decoder import ChunkDecoder

    buckets = [(1, 4), (8, 4), (16, 4), (64, 4)]
    decoder = ChunkDecoder(None, torch.zeros(2, 8, 16, dtype=torch.int64), buckets, torch.device("cpu"),
                           progress=False, sms=32, sms_rows=8)
    assert decoder.limited_graphs is None  # no CUDA: no green context, every call plain
    assert all(decoder.lane(b)[1] is decoder.graphs for b in buckets)
    decoder.limited_graphs = GraphSet("cpu")  # as a CUDA device with codec_sms would have it
    assert [decoder.lane(b)[1] is decoder.limited_graphs for b in buckets] == [True, True, False, False]
    decoder.limited_rows = 0
    assert all(decoder.lane(b)[1] is decoder.limited_graphs for b in buckets)


def test_what_is_kept_for_the_process_outlives_its_last_reference() -> None:
    class Context:  # a green context's stand-in: weakly referable, freed when its last reference goes
        pass

    kept, dropped = Context(), Context()
    _keep_for_the_process(kept)
    refs = weakref.ref(kept), weakref.ref(dropped)
    del kept, dropped
    gc.collect()
    assert refs[0]() is not None and refs[1]() is None


def test_an_sm_limited_stream_needs_a_cuda_device() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device"):
        sm_limited_stream(torch.device("cpu"), 8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_work_on_an_sm_limited_stream_equals_work_on_a_plain_one() -> None:
    """Eager kernels and a graph captured on a plain stream, replayed on the limited one: the same results as on the
    default stream (a green context shares the device's memory), and a count out of range is refused."""
    device = torch.device("cuda")
    stream, _context = sm_limited_stream(device, 16)
    g = torch.Generator(device).manual_seed(0)
    a = torch.randn(512, 384, device=device, generator=g)
    b = torch.randn(384, 256, device=device, generator=g)
    expected = torch.relu(a @ b)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager = torch.relu(a @ b)
    torch.cuda.current_stream().wait_stream(stream)
    out = torch.empty_like(expected)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.mm(a, b, out=out).relu_()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        torch.mm(a, b, out=out).relu_()
    out.zero_()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.replay()
    stream.synchronize()
    torch.testing.assert_close(eager, expected)
    torch.testing.assert_close(out, expected)
    total = torch.cuda.get_device_properties(device).multi_processor_count
    with pytest.raises(ValueError, match="takes 1 to"):
        sm_limited_stream(device, total)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pinned_memory_used_on_an_sm_limited_stream_is_freed_after_its_context_is_dropped() -> None:
    """The abort a test process met at exit: pinned host memory a copy on the limited stream used, freed after the
    stream and its green context were dropped (its free records an event on that stream). A process of its own, so
    an abort fails this test instead of ending the run."""
    code = """if True:
        import gc
        import torch
        from voxgate.engine.sm_stream import sm_limited_stream
        device = torch.device("cuda")
        stream, context = sm_limited_stream(device, 16)
        host = torch.empty(4096, dtype=torch.int16, pin_memory=True)
        with torch.cuda.stream(stream):
            host.copy_(torch.ones(4096, dtype=torch.int16, device=device), non_blocking=True)
        stream.synchronize()
        del stream, context
        gc.collect()
        del host
        torch.cuda.synchronize()
        print("freed")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "freed" in done.stdout, done.stderr[-2000:]
