// The audio thread: reads the jitter buffer once per render quantum, records a tap of exactly what it output,
// and posts throttled playback reports. All policy lives in ring-buffer.js. Fed by the socket worker through a
// transferred MessagePort, so audio never passes through the main thread.
import { JitterBuffer } from "./ring-buffer.js";
import { P } from "./protocol.js";

class Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.jb = null;
    this.feed = null; // the worker's port
    this.port.onmessage = (e) => {
      if (e.data.type === "port") {
        this.feed = e.data.port;
        this.feed.onmessage = (m) => this.onFeed(m.data);
      } else {
        this.onFeed(e.data); // tests may drive the worklet through its own port
      }
    };
  }

  post(msg, transfer) {
    (this.feed || this.port).postMessage(msg, transfer || []);
  }

  onFeed(m) {
    if (m.type === P.CONFIG) {
      this.jb = new JitterBuffer(m, (kind, pts) =>
        this.post({ type: P.EVENT, kind, pts, tap_index: this.tapLen, frame: currentFrame, t_ms: currentTime * 1000 }),
      );
      this.interval = Math.round(((m.intervalMs || 50) * sampleRate) / 1000);
      this.nextReport = currentFrame + this.interval;
      this.tap = new Float32Array(Math.round((m.tapSeconds || 0) * sampleRate));
      this.tapLen = 0;
      this.latencyMs = 0;
    } else if (!this.jb) {
      return;
    } else if (m.type === P.AUDIO) {
      this.jb.write(m.samples, m.pts, m.last);
    } else if (m.type === P.END) {
      this.jb.markEnd(m.pts);
    } else if (m.type === P.TARGET) {
      this.jb.setTarget(m.targetMs);
    } else if (m.type === P.LATENCY) {
      this.latencyMs = m.ms;
    } else if (m.type === P.CANCEL) {
      const playedPts = this.jb.playedPts;
      const cancelPts = this.jb.cancel();
      this.post({ type: P.CANCELLED, id: m.id, played_pts: playedPts, cancel_pts: cancelPts });
    } else if (m.type === P.SKIP) {
      this.jb.skip(m.pts);
    } else if (m.type === P.SYNC) {
      this.post({ type: P.SYNC, id: m.id }); // a barrier: every message before it has been applied
    } else if (m.type === P.TAP_GET) {
      const samples = this.tap.slice(0, this.tapLen);
      this.post({ type: P.TAP, id: m.id, samples, sampleRate }, [samples.buffer]);
    }
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    if (!this.jb || !out) return true;
    this.jb.read(out);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    const room = this.tap.length - this.tapLen;
    if (room > 0) {
      this.tap.set(room >= out.length ? out : out.subarray(0, room), this.tapLen);
      this.tapLen += Math.min(room, out.length);
    }
    if (currentFrame + out.length >= this.nextReport) {
      this.nextReport += this.interval;
      const jb = this.jb;
      this.post({
        type: P.REPORT, played_pts: jb.playedPts, buffered_samples: jb.buffered, underruns: jb.underrunReport,
        output_latency_ms: this.latencyMs, t_ms: currentTime * 1000, state: jb.state, tap_len: this.tapLen,
        frame: currentFrame,
      });
    }
    return true;
  }
}

registerProcessor("voxgate-player", Player);
