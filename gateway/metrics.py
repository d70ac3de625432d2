"""Prometheus metrics, one registry per app (so several apps in one process, as in tests, stay separate)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from voxgate.engine.timeline import FirstAudioTimeline

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
# Stages of a few ms to a second: fine below 20 ms, where the idle tail (issue 26) is read off.
_STAGE_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03,
                  0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


class LabelledView:
    """A registry as seen with constant labels on every sample: the process's `device`, so that one dashboard
    (and one HPA query) tells every engine apart. prometheus_client has no per-registry constant labels."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.registry = registry
        self.labels = labels

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s._replace(labels={**self.labels, **s.labels}) for s in family.samples]
            yield family


class GatewayMetrics:
    def __init__(self, queue_depth: Callable[[], float], free_rows: Callable[[], int | None] | None = None,
                 device: str = "") -> None:
        r = self.registry = CollectorRegistry()
        self._view = LabelledView(r, {"device": device}) if device else r
        self.sessions = Gauge("voxgate_sessions_open", "WebSocket sessions open now", registry=r)
        self.sessions_total = Counter("voxgate_sessions_accepted", "WebSocket sessions accepted", registry=r)
        self.contexts_active = Gauge("voxgate_contexts_active", "Contexts speaking or waiting to speak", registry=r)
        self.contexts_total = Counter("voxgate_contexts_total", "Contexts finished, by outcome", ["outcome"],
                                      registry=r)
        self.first_audio = Histogram("voxgate_first_audio_seconds", "Time from speakable text to first audio",
                                     ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.first_audio_stages = Histogram(
            "voxgate_first_audio_stage_seconds",
            "A request's first audio by stage (admit, queue, prefill, first_frame, codec, hand_over, write; "
            "absent where the engine has none): the stages add up to the time to its first byte written",
            ["endpoint", "stage"], buckets=_STAGE_BUCKETS, registry=r)
        self.stall_events = Counter("voxgate_stall_events_total", "Stalls reported by clients, by cause", ["cause"],
                                    registry=r)
        self.stall_seconds = Counter("voxgate_stall_seconds", "Silence of reported stalls, by cause", ["cause"],
                                     registry=r)
        self.bytes_out = Counter("voxgate_audio_bytes_out_total", "Audio bytes sent", ["endpoint"], registry=r)
        self.audio_seconds = Counter("voxgate_audio_seconds_out_total", "Audio seconds sent", ["endpoint"],
                                     registry=r)
        self.errors = Counter("voxgate_errors_total", "Errors sent to clients, by code", ["code"], registry=r)
        self.admission_refusals = Counter("voxgate_admission_refusals_total",
                                          "New streams refused with engine_full, by door and reason",
                                          ["door", "reason"], registry=r)
        self.http_requests = Counter("voxgate_speech_requests_total", "POST /v1/audio/speech requests, by status",
                                     ["status"], registry=r)
        self.voice_uploads = Counter("voxgate_voice_uploads_total", "POST /v1/voices requests, by status",
                                     ["status"], registry=r)
        self.gc_pause = Histogram("voxgate_engine_gc_pause_seconds",
                                  "Python garbage-collector pauses in the gateway process, by generation",
                                  ["generation"], buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1),
                                  registry=r)
        self.gc_collected = Counter("voxgate_engine_gc_collected_objects_total",
                                    "Objects the garbage collector freed in the gateway process, by generation",
                                    ["generation"], registry=r)
        self.loop_lag = Histogram("voxgate_event_loop_lag_seconds",
                                  "How late the gateway's event loop ran a 10 ms timer", buckets=_LAG_BUCKETS,
                                  registry=r)
        depth = Gauge("voxgate_engine_queue_depth", "Requests admitted by the engine, not yet producing audio",
                      registry=r)
        depth.set_function(queue_depth)
        self.draining = Gauge("voxgate_draining", "1 from the shutdown signal on (/health answers 503)", registry=r)
        if free_rows is not None and free_rows() is not None:  # engines with a fixed number of rows
            rows = Gauge("voxgate_engine_free_rows", "Streams the engine could start now without queueing",
                         registry=r)
            rows.set_function(lambda: float(free_rows() or 0))

    def contexts_active_now(self) -> float:
        """The contexts_active gauge's value (the idle garbage collector's question: is anything speaking?)."""
        return next(iter(self.contexts_active.collect())).samples[0].value

    def observe_first_audio(self, endpoint: str, timeline: FirstAudioTimeline) -> None:
        """One request's first-audio timeline, its `write` stamped: every stage it has, once."""
        for stage, seconds in timeline.stages():
            self.first_audio_stages.labels(endpoint, stage).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self._view)  # type: ignore[arg-type]
