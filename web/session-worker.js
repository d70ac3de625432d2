// The socket worker: owns the WebSocket and the WebCodecs AudioDecoder, and feeds the audio worklet through a
// transferred MessagePort, so audio never waits on the main thread (layout, plotting, GC there cannot starve
// playback). Relays the worklet's playback reports to the server and everything to the page.
import { C, CODEC_ID, FLAG, HEADER_BYTES, P, PROTOCOL, S, mulawToFloat, parseHeader, pcm16ToFloat } from "./protocol.js";

let ws = null;
let feed = null; // MessagePort to the worklet
let session = null; // session.started of the current socket
let recording = false;
let record = { frames: [], messages: [] };
const contexts = new Map(); // context_id -> {ctx, cancelled, acked}
const byCtx = new Map(); // ctx -> context_id
const queue = []; // audio and end marks in arrival order: {ctx, pts, last, samples, ready, dropped, end}
const decoders = new Map(); // ctx -> {decoder, pending: [entry]}
const pendingCancels = new Map(); // cancel id (from the page) -> context ids
const stats = {};
const resetStats = () =>
  Object.assign(stats, { frames: 0, bytes: 0, by_ctx: {}, dropped_frames: 0, frames_after_ack: 0,
                        preskip_trimmed_by_decoder: null });
resetStats();

const toPage = (msg, transfer) => self.postMessage(msg, transfer || []);
const toWorklet = (msg, transfer) => feed && feed.postMessage(msg, transfer || []);
const send = (msg) => session && ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify(msg));

self.onmessage = (e) => {
  const m = e.data;
  if (m.type === "init") {
    feed = m.port;
    feed.onmessage = (ev) => onWorklet(ev.data);
  } else if (m.type === "connect") connect(m);
  else if (m.type === "send") {
    if (m.msg.context_id && !contexts.has(m.msg.context_id)) contexts.set(m.msg.context_id, { ctx: null });
    send(m.msg);
  } else if (m.type === "stop") stop(m.id);
  else if (m.type === "latency") toWorklet({ type: P.LATENCY, ms: m.ms });
  else if (m.type === "tap") toWorklet({ type: P.TAP_GET, id: m.id });
  else if (m.type === "record") toPage({ type: "record", id: m.id, record, stats });
  else if (m.type === "close") ws && ws.close(1000);
};

function connect({ url, start, tapSeconds, record: rec }) {
  if (ws) ws.close(1000);
  session = null;
  resetStats();
  recording = !!rec;
  record = { frames: [], messages: [] };
  contexts.clear();
  byCtx.clear();
  queue.length = 0;
  for (const d of decoders.values()) closeDecoder(d);
  decoders.clear();
  const sock = new WebSocket(url, [PROTOCOL]);
  ws = sock;
  sock.binaryType = "arraybuffer";
  sock.onopen = () => sock.send(JSON.stringify(start));
  sock.onclose = (ev) => ws === sock && toPage({ type: "closed", code: ev.code, reason: ev.reason });
  sock.onerror = () => ws === sock && toPage({ type: "socket-error" });
  sock.onmessage = (ev) => {
    if (ws !== sock) return;
    if (typeof ev.data === "string") onServer(JSON.parse(ev.data), tapSeconds);
    else onFrame(ev.data);
  };
}

function onServer(msg, tapSeconds) {
  const t = performance.timeOrigin + performance.now();
  if (recording) record.messages.push({ t, seq: stats.frames, msg });
  if (msg.type === S.SESSION_STARTED) {
    session = msg;
    toWorklet({
      type: P.CONFIG, sampleRate: msg.audio.sample_rate, targetMs: msg.pacing.target_buffer_ms,
      intervalMs: msg.pacing.feedback_interval_ms || 50, tapSeconds: tapSeconds || 0,
    });
  } else if (msg.type === S.CONTEXT_STARTED) {
    const c = contexts.get(msg.context_id) || { ctx: null };
    c.ctx = msg.ctx;
    contexts.set(msg.context_id, c);
    byCtx.set(msg.ctx, msg.context_id);
  } else if (msg.type === S.FLUSHED) {
    const c = contexts.get(msg.context_id);
    if (c && !c.cancelled) enqueue({ ctx: c.ctx, end: true, pts: msg.end_pts, ready: true });
  } else if (msg.type === S.CONTEXT_CANCELLED || msg.type === S.CONTEXT_DONE) {
    const c = contexts.get(msg.context_id);
    if (c) c.acked = true;
    if (msg.type === S.CONTEXT_CANCELLED) {
      dropContext(msg.ctx);
      if (c && c.cancelled) toWorklet({ type: P.SKIP, pts: msg.cancel_pts });
    }
  } else if (msg.type === S.METRICS && msg.target_ms) {
    toWorklet({ type: P.TARGET, targetMs: msg.target_ms });
  }
  toPage({ type: "server", msg, t });
}

function onFrame(buf) {
  const hdr = parseHeader(buf);
  stats.frames += 1;
  stats.bytes += buf.byteLength;
  const received = (stats.by_ctx[hdr.ctx] ||= { frames: 0, bytes: 0 }); // the page shows each utterance's own
  received.frames += 1;
  received.bytes += buf.byteLength;
  const id = byCtx.get(hdr.ctx);
  const c = id !== undefined ? contexts.get(id) : null;
  if (recording) record.frames.push({ hdr, payload: new Uint8Array(buf, HEADER_BYTES).slice() });
  if (c && c.acked) stats.frames_after_ack += 1; // a protocol violation the tests look for
  if (c && c.cancelled) {
    stats.dropped_frames += 1;
    return;
  }
  const last = (hdr.flags & FLAG.LAST) !== 0;
  const entry = { ctx: hdr.ctx, pts: hdr.pts, last, ready: true };
  if (hdr.samples === 0) {
    // An empty frame: the context's end (LAST) after its audio already went out, or a context with no audio.
    // Its end is marked like a flush point's, in order behind the packets still decoding.
    if (last) {
      releaseDecoder(hdr.ctx);
      enqueue({ ctx: hdr.ctx, pts: hdr.pts, end: true, ready: true });
    }
  } else if (hdr.codec === CODEC_ID.pcm_s16le) {
    enqueue({ ...entry, samples: pcm16ToFloat(buf, HEADER_BYTES, hdr.samples) });
  } else if (hdr.codec === CODEC_ID.mulaw) {
    enqueue({ ...entry, samples: mulawToFloat(new Uint8Array(buf, HEADER_BYTES)) });
  } else if (hdr.codec === CODEC_ID.opus) {
    decodeOpus(hdr, new Uint8Array(buf, HEADER_BYTES), last);
  }
}

function decodeOpus(hdr, packet, last) {
  let d = decoders.get(hdr.ctx);
  if (!d || hdr.flags & FLAG.CODEC_RESET || d.decoder.state === "closed") {
    if (d) closeDecoder(d);
    d = openDecoder(hdr.ctx);
    decoders.set(hdr.ctx, d);
  }
  const first = (hdr.flags & FLAG.FIRST) !== 0;
  const entry = { ctx: hdr.ctx, pts: hdr.pts, last, expected: hdr.samples, ready: false, first };
  d.pending.push(entry);
  enqueue(entry);
  const timestamp = Math.round((hdr.pts * 1e6) / session.audio.sample_rate);
  d.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp, data: packet }));
  if (last) releaseDecoder(hdr.ctx);
}

// The context's last packet went in: let its output out, then free the decoder.
function releaseDecoder(ctx) {
  const d = decoders.get(ctx);
  if (!d) return;
  d.decoder.flush().then(() => closeDecoder(d), () => {});
  decoders.delete(ctx);
}

function openDecoder(ctx) {
  const d = { pending: [], decoder: null };
  d.decoder = new AudioDecoder({
    output: (data) => onDecoded(d, data),
    error: (err) => {
      for (const entry of d.pending) Object.assign(entry, { ready: true, dropped: true });
      d.pending.length = 0;
      toPage({ type: "decoder-error", ctx, message: String(err) });
      drain();
    },
  });
  const head = Uint8Array.from(atob(session.audio.opus_head_b64), (ch) => ch.charCodeAt(0));
  d.decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 1, description: head });
  return d;
}

function closeDecoder(d) {
  for (const entry of d.pending) Object.assign(entry, { ready: true, dropped: true }); // never decoded
  d.pending.length = 0;
  if (d.decoder.state !== "closed") d.decoder.close();
}

// One AudioData per packet, in order. The frame header's `samples` is authoritative: where the decoder gave
// more (it did not trim the OpusHead pre-skip after a reset), the surplus at the front is the pre-skip.
function onDecoded(d, data) {
  const entry = d.pending.shift();
  const n = data.numberOfFrames;
  if (!entry) return data.close();
  const all = new Float32Array(n);
  data.copyTo(all, { planeIndex: 0, format: "f32-planar" });
  data.close();
  if (entry.first && stats.preskip_trimmed_by_decoder === null) stats.preskip_trimmed_by_decoder = n === entry.expected;
  entry.samples = n > entry.expected ? all.subarray(n - entry.expected) : all;
  entry.ready = true;
  drain();
}

function enqueue(entry) {
  queue.push(entry);
  drain();
}

function drain() {
  while (queue.length > 0 && queue[0].ready) {
    const e = queue.shift();
    if (e.dropped) continue;
    if (e.end) toWorklet({ type: P.END, pts: e.pts });
    else {
      const samples = e.samples.byteOffset === 0 ? e.samples : e.samples.slice();
      toWorklet({ type: P.AUDIO, pts: e.pts, samples, last: e.last }, [samples.buffer]);
    }
  }
}

function dropContext(ctx) {
  for (const e of queue) if (e.ctx === ctx) Object.assign(e, { ready: true, dropped: true });
  const d = decoders.get(ctx);
  if (d) {
    closeDecoder(d);
    decoders.delete(ctx);
  }
  drain();
}

// Barge-in: stop the audio at once (the worklet fades out and drops its buffer), drop every later frame of
// the contexts, then tell the server where playback stopped.
function stop(id) {
  const targets = [...contexts.entries()].filter(([, c]) => !c.acked && !c.cancelled).map(([cid]) => cid);
  for (const id of targets) {
    const c = contexts.get(id) || { ctx: null };
    c.cancelled = true;
    contexts.set(id, c);
    if (c.ctx !== null) dropContext(c.ctx);
  }
  pendingCancels.set(id, targets);
  toWorklet({ type: P.CANCEL, id });
}

function onWorklet(m) {
  if (m.type === P.REPORT) {
    const { played_pts, buffered_samples, underruns, output_latency_ms, t_ms } = m;
    send({ type: C.PLAYBACK, track: 0, played_pts, buffered_samples, underruns, output_latency_ms, t_ms });
    toPage({ type: "report", report: m, stats });
  } else if (m.type === P.CANCELLED) {
    for (const id of pendingCancels.get(m.id) || []) {
      send({ type: C.CONTEXT_CANCEL, context_id: id, played_pts: m.played_pts });
    }
    pendingCancels.delete(m.id);
    toPage({ type: "cancelled", played_pts: m.played_pts, cancel_pts: m.cancel_pts });
  } else if (m.type === P.EVENT) {
    toPage({ type: "event", event: m, t: performance.timeOrigin + performance.now() });
  } else if (m.type === P.TAP) {
    toPage({ type: "tap", id: m.id, samples: m.samples, sampleRate: m.sampleRate }, [m.samples.buffer]);
  }
}
