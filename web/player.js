// Main-thread wiring of the audio path: the AudioContext (created from a user gesture), the worklet node, the
// socket worker, and the MessageChannel that connects worker and worklet directly.
import { P } from "./protocol.js";

/** Browsers start an AudioContext only from a user gesture; Safari can also leave it "interrupted" later, so
 * resume() is retried on every pointerdown/keydown, not only the first. */
function unlockOnGesture(ac) {
  const resume = () => {
    if (ac.state !== "running" && ac.state !== "closed") ac.resume().catch(() => {});
  };
  for (const ev of ["pointerdown", "keydown", "touchend"]) window.addEventListener(ev, resume, { capture: true });
  resume();
}

export class Player {
  constructor(onMessage) {
    this.worker = new Worker(new URL("./session-worker.js", import.meta.url), { type: "module" });
    this.worker.onmessage = (e) => onMessage(e.data);
    this.ac = null;
    this.node = null;
    this.ready = null;
    this.latencyTimer = null;
  }

  /** Call synchronously inside a click handler: creates (or re-creates, for another rate) the AudioContext. */
  ensureAudio(sampleRate) {
    if (this.ac && this.wantRate === sampleRate && this.ac.state !== "closed") {
      if (this.ac.state !== "running") this.ac.resume().catch(() => {});
      return this.ready;
    }
    if (this.ac) this.ac.close().catch(() => {});
    const ac = new AudioContext({ sampleRate, latencyHint: "interactive" });
    this.ac = ac;
    this.wantRate = sampleRate;
    unlockOnGesture(ac);
    this.ready = ac.audioWorklet.addModule(new URL("./player-worklet.js", import.meta.url)).then(() => {
      const node = new AudioWorkletNode(ac, "voxgate-player", { numberOfInputs: 0, outputChannelCount: [1] });
      node.connect(ac.destination);
      const ch = new MessageChannel();
      node.port.postMessage({ type: "port", port: ch.port1 }, [ch.port1]);
      this.worker.postMessage({ type: "init", port: ch.port2 }, [ch.port2]);
      if (this.node) this.node.disconnect();
      this.node = node;
      clearInterval(this.latencyTimer);
      this.latencyTimer = setInterval(() => this.post({ type: "latency", ms: this.outputLatencyMs() }), 500);
      return ac;
    });
    return this.ready;
  }

  /** What the listener hears lags the worklet by the base latency plus the device latency, where known. */
  outputLatencyMs() {
    const ac = this.ac;
    return ac ? ((ac.outputLatency || 0) + (ac.baseLatency || 0)) * 1000 : 0;
  }

  post(msg) {
    this.worker.postMessage(msg);
  }

  /** Barge-in: the worklet fades out at once (one hop), the worker drops the contexts and tells the server. */
  stop(id) {
    if (this.node) this.node.port.postMessage({ type: P.STOP, id });
    this.post({ type: "stop", id });
  }
}
