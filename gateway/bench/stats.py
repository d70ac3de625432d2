"""Per-request samples (what the JSON report keeps) and the per-phase summary computed from them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .capacity import in_slo
from .load_client import Trace
from .playback import heard_at, listen

KEEP_TRACES = False  # set by the CLI's --keep-traces: adds every frame's (arrival, duration) to each sample


def to_sample(trace: Trace, t0: float, warmup: bool) -> dict[str, Any]:
    """A JSON-ready record of one request; times are seconds from the phase start."""
    heard = listen(trace.chunks)
    ttfa = trace.ttfa_s
    sample: dict[str, Any] = {
        "text_index": trace.text_index,
        "words": trace.words,
        "max_audio_ms": trace.max_audio_ms,
        "scheduled_s": _rel(trace.scheduled, t0),
        "sent_s": _rel(trace.sent, t0),
        "ttfa_ms": None if ttfa is None else ttfa * 1e3,
        "done_s": _rel(trace.done, t0),
        "audio_s": heard.audio_s,
        "chunks": len(trace.chunks),
        "pauses_ms": [p * 1e3 for p in heard.pauses],
        "total_pause_ms": heard.total_pause_s * 1e3,
        "max_pause_ms": heard.max_pause_s * 1e3,
        "in_slo": in_slo(ttfa, heard.total_pause_s, trace.ok),
        "ok": trace.ok,
        "error": trace.error,
        "refused": trace.refused,  # engine_full: neither an error nor in SLO
        "refusal_ms": None if trace.refusal_s is None else trace.refusal_s * 1e3,
        "retry_after_ms": None if trace.retry_after_s is None else trace.retry_after_s * 1e3,
        "warmup": warmup,
        "server_first_audio_ms": trace.server_first_audio_ms,
    }
    if trace.paced_s > 0:
        sample["paced_ms"] = trace.paced_s * 1e3
    if trace.server_stages_ms is not None:
        sample["server_stages_ms"] = trace.server_stages_ms
    if trace.server_stalls is not None:
        sample["server_stalls"] = trace.server_stalls
    if trace.timed_words is not None:
        sample["timed_words"] = trace.timed_words
        sample |= _word_fields(word_leads(trace.chunks, trace.word_times))
    if KEEP_TRACES:
        sample["trace"] = [[round(t - t0, 6), d] for t, d in trace.chunks]
    return sample


def word_leads(chunks: Sequence[tuple[float, float]],
               word_times: Sequence[tuple[float, float, int]]) -> list[tuple[bool, float | None]]:
    """Per timed word `(event arrival, start in audio s, chunks received before the event)`: whether the event
    came after the chunk holding the word's first sample, and its lead in seconds: when the listener hears that
    sample (the playback model) less the event's arrival, negative when the word was heard before its time came.
    The lead is None for a word that starts past the audio received (a cancelled or failed request)."""
    heard = heard_at(chunks, (start for _, start, _ in word_times))
    out: list[tuple[bool, float | None]] = []
    for (arrival, _, received), where in zip(word_times, heard, strict=True):
        if where is None:
            out.append((False, None))
        else:
            chunk, heard_s = where
            out.append((chunk < received, heard_s - arrival))
    return out


def _word_fields(leads: list[tuple[bool, float | None]]) -> dict[str, Any]:
    """A sample's word-timing fields: counts, the least lead, and each lead in whole ms (for the phase's
    percentiles; `words_late` and the minimum are taken before rounding)."""
    heard = [lead for _, lead in leads if lead is not None]
    return {
        "words_after_audio": sum(1 for after, _ in leads if after),
        "words_late": sum(1 for lead in heard if lead < 0),
        "word_lead_ms_min": min(heard) * 1e3 if heard else None,
        "word_leads_ms": [round(lead * 1e3) for lead in heard],
    }


def _rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 6)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Statistics over the measured (non-warm-up) samples."""
    measured = [s for s in samples if not s["warmup"]]
    ttfa = [s["ttfa_ms"] for s in measured if s["ttfa_ms"] is not None]
    pauses = [p for s in measured for p in s["pauses_ms"]]
    n = len(measured)
    refusals = [s["refusal_ms"] for s in measured if s.get("refused")]
    summary = {
        "requests": n,
        "errors": sum(1 for s in measured if not s["ok"] and not s.get("refused")),
        "refused": len(refusals),
        "refusal_share": len(refusals) / n if n else None,
        "refusal_ms": {"p50": percentile(refusals, 50), "p99": percentile(refusals, 99)},
        "in_slo": sum(1 for s in measured if s["in_slo"]),
        "in_slo_share": (sum(1 for s in measured if s["in_slo"]) / n) if n else None,
        "ttfa_ms": {f"p{q}": percentile(ttfa, q) for q in (50, 90, 99)} | {"max": max(ttfa, default=None)},
        "requests_paused": sum(1 for s in measured if s["pauses_ms"]),
        "underruns": len(pauses),
        "underrun_total_ms": sum(pauses),
        "max_pause_ms": max(pauses, default=0.0),
        "total_pause_ms_p99": percentile([s["total_pause_ms"] for s in measured], 99),
        "audio_s": sum(s["audio_s"] for s in measured),
        # the session's message limit held requests back (MessagePacer): how many, and the seconds in all
        "requests_paced": sum(1 for s in measured if s.get("paced_ms")),
        "paced_s": sum(s.get("paced_ms", 0.0) for s in measured) / 1e3,
    }
    errors = Counter(s["error"] for s in measured if s["error"] and not s.get("refused"))
    if errors:  # the commonest, so that a phase of errors says which
        summary["error_top"], summary["error_top_count"] = errors.most_common(1)[0]
    timed = [s for s in measured if s.get("timed_words") is not None]
    if timed:  # sessions with word timestamps; the keys are absent otherwise
        summary |= _word_summary(timed)
    return summary


def _word_summary(timed: list[dict[str, Any]]) -> dict[str, Any]:
    """Word timestamps over a phase's samples that had them: every word's lead pooled."""
    leads = [lead for s in timed for lead in s.get("word_leads_ms", [])]
    mins = [s["word_lead_ms_min"] for s in timed if s.get("word_lead_ms_min") is not None]
    return {
        "words_timed": sum(s["timed_words"] for s in timed),
        "words_after_audio": sum(s.get("words_after_audio", 0) for s in timed),
        "words_late": sum(s.get("words_late", 0) for s in timed),
        "word_lead_ms_p50": percentile(leads, 50),
        "word_lead_ms_p1": percentile(leads, 1),
        "word_lead_ms_min": min(mins, default=None),
    }
