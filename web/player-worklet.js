// The audio thread: reads the jitter buffer once per render quantum, records a tap of exactly what it output,
// and posts throttled playback reports. All policy lives in ring-buffer.js. Fed by the socket worker through a
// transferred MessagePort, so audio never passes through the main thread.
import { JitterBuffer } from "./ring-buffer.js";
import { P } from "./protocol.js";

class Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.jb = null;
    this.feed = null; // the worker's port; tests may drive the worklet through its own port instead
    this.port.onmessage = (e) => {
      if (e.data.type !== "port") return this.onFeed(e.data);
      this.feed = e.data.port;
      this.feed.onmessage = (m) => this.onFeed(m.data);
    };
  }

  post(msg, transfer = []) { (this.feed || this.port).postMessage(msg, transfer); }

  configure(m) {
    this.jb = new JitterBuffer(m, (kind, pts, offset) => this.post({ type: P.EVENT, kind, pts,
      tap_index: this.tapLen + offset, frame: currentFrame + offset, t_ms: currentTime * 1000 }));
    this.interval = Math.round(((m.intervalMs || 50) * sampleRate) / 1000);
    this.nextReport = currentFrame + this.interval;
    this.tap = new Float32Array(Math.round((m.tapSeconds || 0) * sampleRate)); // allocated once
    this.tapLen = 0;
    this.latencyMs = 0;
    this.lastCancel = 0; // cancel ids increase; each is applied once, by whichever path delivers it first
    this.early = null; // a cancel straight from the page, until the worker's copy (audio in between is stale)
  }

  cancelOnce(id) {
    if (id <= this.lastCancel) return null;
    this.lastCancel = id;
    return { id, played_pts: this.jb.playedPts, cancel_pts: this.jb.cancel() }; // (read before the cancel)
  }

  onFeed(m) {
    if (m.type === P.CONFIG) return this.configure(m);
    if (m.type === P.SYNC) return this.post(m); // a barrier: every message before it has been applied
    const jb = this.jb;
    if (!jb) return;
    if (m.type === P.AUDIO) this.early || jb.write(m.samples, m.pts, m.last);
    else if (m.type === P.END) this.early || jb.markEnd(m.pts);
    else if (m.type === P.TARGET) jb.setTarget(m.targetMs);
    else if (m.type === P.LATENCY) this.latencyMs = m.ms;
    else if (m.type === P.SKIP) jb.skip(m.pts);
    else if (m.type === P.STOP) this.early = this.cancelOnce(m.id) || this.early;
    else if (m.type === P.CANCEL) {
      this.post({ type: P.CANCELLED, ...(this.cancelOnce(m.id) || this.early) });
      this.early = null;
    } else if (m.type === P.TAP_GET) {
      const samples = this.tap.slice(0, this.tapLen);
      this.post({ type: P.TAP, id: m.id, samples, sampleRate }, [samples.buffer]);
    }
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    if (!this.jb || !out) return true;
    const jb = this.jb;
    jb.read(out);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    const n = Math.min(out.length, this.tap.length - this.tapLen); // the tap stops when full
    if (n === out.length) this.tap.set(out, this.tapLen);
    else if (n > 0) this.tap.set(out.subarray(0, n), this.tapLen);
    this.tapLen += n;
    if (currentFrame + out.length >= this.nextReport) {
      this.nextReport += this.interval;
      this.post({
        type: P.REPORT, played_pts: jb.playedPts, buffered_samples: jb.buffered, underruns: jb.underrunReport,
        output_latency_ms: this.latencyMs, t_ms: currentTime * 1000, frame: currentFrame, state: jb.state,
        tap_len: this.tapLen,
      });
    }
    return true;
  }
}

registerProcessor("voxgate-player", Player);
