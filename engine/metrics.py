"""The engine loop's Prometheus metrics: step time by row bucket and part, rows and prompt tokens per step, queue
wait before a stream's first step, time to its first chunk. Registered into the gateway's registry
(`Engine.register_metrics`), observed from the worker thread once per step (prometheus_client is thread-safe).

Parts of a step: `gpu` (the captured decode step: waiting for its frames), `codec` (the chunk decode and its
copy back), `host` (scheduling, filling inputs, postprocess: the Python the GPU waits for), `total`.

`AlignerMetrics`: the forced aligner beside the loop (engine/aligner/worker.py), once per call: its time, the
segments it measured, their audio; busy seconds over audio seconds is its cost per second of speech.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from .core import StepOutput

_STEP_BUCKETS = (0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.012, 0.014, 0.016, 0.020, 0.025, 0.030, 0.040, 0.060,
                 0.100, 0.250, 1.0)
_WAIT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_ROW_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256)


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.step_seconds = Histogram("voxgate_engine_step_seconds", "Engine step time by row bucket and part",
                                      ["bucket", "part"], buckets=_STEP_BUCKETS, registry=r)
        self.rows = Histogram("voxgate_engine_rows_per_step", "Decode rows per engine step", buckets=_ROW_BUCKETS,
                              registry=r)
        self.prefill_tokens = Histogram("voxgate_engine_prefill_tokens_per_step", "Prompt tokens per engine step",
                                        buckets=(0, 16, 32, 64, 128, 256, 512), registry=r)
        self.queue_wait = Histogram("voxgate_engine_queue_wait_seconds", "Admission to a stream's first step",
                                    buckets=_WAIT_BUCKETS, registry=r)
        self.first_chunk = Histogram("voxgate_engine_first_chunk_seconds", "Admission to a stream's first chunk",
                                     buckets=_WAIT_BUCKETS, registry=r)
        self.steps = Counter("voxgate_engine_steps", "Engine steps run", registry=r)
        self.frames = Counter("voxgate_engine_frames", "Codec frames generated (80 ms of audio each)", registry=r)

    def observe(self, out: StepOutput, bucket: str, total_s: float) -> None:
        t = out.times
        gpu = t.get("gpu", 0.0)
        host = t.get("schedule", 0.0) + t.get("post", 0.0) + t.get("fill", 0.0)
        for part, seconds in (("gpu", gpu), ("codec", t.get("codec", 0.0)), ("host", host), ("total", total_s)):
            self.step_seconds.labels(bucket, part).observe(seconds)
        self.rows.observe(out.num_rows)
        self.prefill_tokens.observe(out.num_prefill_tokens)
        self.steps.inc()
        self.frames.inc(out.num_frames)
        for request in out.started:
            if request.first_step_at is not None:
                self.queue_wait.observe(request.first_step_at - request.arrival)
        for request, _ in [*out.handed_early, *out.chunks]:
            if request.num_chunks == 1 and request.first_audio_at is not None:
                self.first_chunk.observe(request.first_audio_at - request.arrival)


class AlignerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.call_seconds = Histogram("voxgate_engine_aligner_call_seconds", "Forced-aligner call time (a batch of "
                                      "segments, audio in to words out)", buckets=_WAIT_BUCKETS, registry=r)
        self.segments = Histogram("voxgate_engine_aligner_segments_per_call", "Segments measured per aligner call",
                                  buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.busy = Counter("voxgate_engine_aligner_busy_seconds", "Time spent in aligner calls", registry=r)
        self.parts = Counter("voxgate_engine_aligner_part_seconds", "Time spent in aligner calls by part, GIL waits "
                             "included: resample (clips to 16 kHz), prepare (prompts built, features queued), queue "
                             "(encoder and decoder queued), gpu_wait (blocked until the GPU has run them), post "
                             "(results read, word times)", ["part"], registry=r)
        self.host_cpu = Counter("voxgate_engine_aligner_host_cpu_seconds", "The aligner thread's CPU time in its "
                                "calls' host parts (resample, prepare, queue): their wall time less this is waiting "
                                "(for the GIL, the resampling threads, or in a blocking CUDA call)", registry=r)
        self.audio = Counter("voxgate_engine_aligner_audio_seconds", "Audio aligned", registry=r)

    def observe(self, segments: int, audio_s: float, seconds: float, parts: dict[str, float] | None = None,
                host_cpu_s: float = 0.0) -> None:
        self.call_seconds.observe(seconds)
        self.segments.observe(segments)
        self.busy.inc(seconds)
        self.audio.inc(audio_s)
        for part, part_s in (parts or {}).items():
            self.parts.labels(part).inc(part_s)
        self.host_cpu.inc(host_cpu_s)
