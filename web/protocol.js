// The voxgate v1 wire protocol (docs/protocol.md) and the page's internal thread messages, as constants.
// Shared by the main thread, the socket worker, the audio worklet and the tests. No DOM, no Web Audio.

export const PROTOCOL = "voxgate.v1";
export const WS_PATH = "/v1/tts/ws";

/** Client -> server message types. */
export const C = Object.freeze({
  SESSION_START: "session.start",
  CONTEXT_OPEN: "context.open",
  TEXT_APPEND: "text.append",
  CONTEXT_FLUSH: "context.flush",
  CONTEXT_END: "context.end",
  CONTEXT_CANCEL: "context.cancel",
  CLEAR: "clear",
  PLAYBACK: "playback",
  PING: "ping",
});

/** Server -> client message types. */
export const S = Object.freeze({
  SESSION_STARTED: "session.started",
  CONTEXT_STARTED: "context.started",
  FLUSHED: "flushed",
  CONTEXT_DONE: "context.done",
  CONTEXT_CANCELLED: "context.cancelled",
  STALL: "stall",
  METRICS: "metrics",
  WARNING: "warning",
  ERROR: "error",
  PONG: "pong",
  SESSION_DRAINING: "session.draining", // the server shuts down: live contexts finish within grace_ms
  TIMESTAMPS: "timestamps", // words of a context and when they are heard (session.start timestamps: "word")
});

/** Binary frame: a 24-byte little-endian header, then the payload (4-byte aligned). */
export const HEADER_BYTES = 24;
export const FRAME_VERSION = 1;
export const CODEC_ID = Object.freeze({ pcm_s16le: 0, opus: 1, mulaw: 3 });
// PACKETS: several Opus packets, each after its u16 length; only long asap frames (the demo asks for 20 ms frames).
export const FLAG = Object.freeze({ FIRST: 1, LAST: 2, DISCONT: 4, CODEC_RESET: 8, PACKETS: 16 });

/**
 * @typedef {object} FrameHeader
 * @property {number} version
 * @property {number} codec    0 pcm_s16le, 1 opus, 3 mulaw
 * @property {number} flags    FLAG bits
 * @property {number} ctx      numeric context handle (context.started.ctx)
 * @property {number} seq      per connection, +1 per frame
 * @property {number} track
 * @property {number} samples  samples this frame adds to the timeline, at the session rate
 * @property {number} pts      timeline position of the frame's first sample
 */

/** @param {ArrayBuffer} buf @returns {FrameHeader} */
export function parseHeader(buf) {
  if (buf.byteLength < HEADER_BYTES) throw new Error(`short frame: ${buf.byteLength} bytes`);
  const v = new DataView(buf);
  const version = v.getUint8(0);
  if (version !== FRAME_VERSION) throw new Error(`unknown frame version ${version}`);
  return {
    version,
    codec: v.getUint8(1),
    flags: v.getUint16(2, true),
    ctx: v.getUint32(4, true),
    seq: v.getUint32(8, true),
    track: v.getUint16(12, true),
    samples: v.getUint16(14, true),
    pts: Number(v.getBigUint64(16, true)),
  };
}

/** PCM16 little-endian payload -> float32 in [-1, 1), exactly x / 32768. */
export function pcm16ToFloat(buf, offset, count) {
  const src = new Int16Array(buf, offset, count);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = src[i] / 32768;
  return out;
}

/** G.711 mu-law byte -> float32 (the standard expansion, scaled by 1/32768). */
export function mulawToFloat(bytes) {
  const out = new Float32Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const u = ~bytes[i] & 0xff;
    const t = (((u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
    out[i] = ((u & 0x80) ? 0x84 - t : t - 0x84) / 32768;
  }
  return out;
}

/**
 * Messages between the socket worker and the audio worklet (over the transferred MessagePort).
 * worker -> worklet: {type: P.CONFIG, sampleRate, targetMs, fadeMs, intervalMs, tapSeconds}
 *                    {type: P.AUDIO, pts, samples: Float32Array, last: boolean}
 *                    {type: P.END, pts}        a flush point: audio up to pts is complete for now
 *                    {type: P.TARGET, targetMs}
 *                    {type: P.CANCEL, id}      fade out and drop everything buffered (ids increase)
 * page -> worklet:   {type: P.STOP, id}        the same cancel straight from the click, one hop sooner; audio
 *                                              arriving before the worker's CANCEL with that id is dropped
 *                    {type: P.SKIP, pts}       after a cancel: the server's cancel_pts, where the next context starts
 *                    {type: P.TAP_GET, id}     send back the tap
 *                    {type: P.LATENCY, ms}
 *                    {type: P.SYNC, id}        answered by the same message once everything before it is applied
 * worklet -> worker: {type: P.REPORT, played_pts, buffered_samples, underruns, output_latency_ms, t_ms, state}
 *                    {type: P.CANCELLED, id, played_pts, cancel_pts}
 *                    {type: P.EVENT, kind: "start"|"stall"|"resume"|"idle"|"cancel", pts, tap_index, t_ms}
 *                    {type: P.TAP, id, samples: Float32Array, events}
 */
export const P = Object.freeze({
  CONFIG: "config",
  AUDIO: "audio",
  END: "end",
  TARGET: "target",
  CANCEL: "cancel",
  TAP_GET: "tap.get",
  LATENCY: "latency",
  SYNC: "sync",
  SKIP: "skip",
  STOP: "stop",
  REPORT: "report",
  CANCELLED: "cancelled",
  EVENT: "event",
  TAP: "tap",
});

export const RENDER_QUANTUM_FRAMES = 128;
