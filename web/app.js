// The demo page: controls, the session lifecycle, streaming text in, and the live panel.
// URL parameters (for tests and debugging): ws=<WebSocket URL>, tap=<seconds of output to record>, record=1
// (keep every frame and message the worker received), token=<auth token> (voices and the WebSocket), and codec,
// pacing, target, mode, wps, voice to preset the controls.
import { Inspector } from "./inspect.js";
import { Notes, UtterancePanel } from "./panel.js";
import { BufferPlot } from "./plot.js";
import { Player } from "./player.js";
import { C, PROTOCOL, S, WS_PATH } from "./protocol.js";
import { wireClonePanel } from "./voice-upload.js";
import { fillLanguages, fillVoices } from "./voice-list.js";
import { SAMPLES, wireSamples } from "./samples.js";
import { WordHighlighter, wordsUnavailable } from "./words.js";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const now = () => performance.timeOrigin + performance.now();
const canOpus = typeof AudioDecoder !== "undefined";
const RATES = { pcm_s16le: 24000, opus: 48000, mulaw: 8000 }; // the AudioContext runs at the session's rate

/** Everything the page knows, exposed as window.voxgate.state for tests and curious people. */
const state = {
  connected: false,
  session: null,
  contexts: {}, // id -> {speakAt, started, done, cancelled, firstAudioMs}
  current: null, // the latest utterance: the panel shows its figures
  active: null, // the utterance speaking or playing: Stop acts on it, Speak waits for it
  events: [], // worklet events: {kind, pts, tap_index, t}
  serverStalls: [],
  cancels: [], // worklet cancel acks {played_pts, cancel_pts}
  errors: [],
  report: null,
  stats: null,
  targetMs: 150,
  firstAudioMs: null,
  counts: {},
};

const plot = new BufferPlot($("plot"));
const panel = new UtterancePanel($);
const player = new Player(onWorker);
const inspector = new Inspector(player);
const audioFrame = () => (player.ac ? player.ac.currentTime * player.ac.sampleRate : null); // the render clock
const highlighter = new WordHighlighter($("words"), audioFrame);
const notes = new Notes($("note"));
let sessionKey = null;
let sessionWait = null;
const t0 = now(); // one origin for the page's life: log and plot times never restart
let nextId = 0;
let streamTimer = null;
let cancelSeq = 0;

function log(text) {
  const li = document.createElement("li");
  li.textContent = `${((now() - t0) / 1000).toFixed(2)}s  ${text}`;
  const ol = $("log");
  ol.prepend(li);
  while (ol.children.length > 200) ol.lastChild.remove();
}

/** Speak acts while nothing is speaking or playing (and there is text); Stop only while something is. */
function syncControls() {
  $("speak").disabled = state.active !== null || !$("text").value.trim();
  $("stop").disabled = state.active === null;
}

/** The active utterance is over (played out, stopped, refused or cut off). */
function endUtterance(id) {
  if (state.active !== id || id === null) return;
  state.active = null;
  highlighter.finish(false); // (a last move of the mark, unless Stop or a cancel ended it first)
  clearTimeout(streamTimer);
  syncControls();
}

async function loadVoices() {
  await fillVoices($, params.get("token"), params.get("voice"));
  notes.set("voices", null);
}

function controls() {
  return {
    codec: $("codec").value,
    pacing: $("pacing").value,
    target: Number($("target").value) || 150,
    mode: $("mode").value,
    wps: Math.max(1, Number($("wps").value) || 20),
    voice: $("voice").value,
    language: $("language").value,
    instruct: $("instruct").value.trim(),
    text: $("text").value,
    words: $("words-on").checked,
  };
}

function wsUrl() {
  if (params.get("ws")) return params.get("ws");
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${WS_PATH}`;
  return params.get("token") ? `${url}?token=${encodeURIComponent(params.get("token"))}` : url;
}

function ensureSession(cfg, sampleRate) {
  const key = `${cfg.codec}|${cfg.pacing}|${cfg.target}|${cfg.words}`;
  if (sessionKey === key && sessionWait) return sessionWait; // connected, or connecting
  sessionKey = key;
  state.connected = false;
  sessionWait = new Promise((resolve, reject) => {
    state.onStarted = resolve;
    state.onFailed = reject;
  });
  const start = {
    type: C.SESSION_START,
    protocol: PROTOCOL,
    audio: cfg.codec === "pcm_s16le" ? { codec: cfg.codec, sample_rate: sampleRate } : { codec: cfg.codec },
    pacing: { mode: cfg.pacing, target_buffer_ms: cfg.target },
    feedback_interval_ms: 50,
    metrics_interval_ms: 250,
    timestamps: cfg.words ? "word" : "none",
  };
  plot.clear();
  player.post({ type: "connect", url: wsUrl(), start, tapSeconds: Number(params.get("tap")) || 0,
                record: params.get("record") === "1" });
  return sessionWait;
}

async function speak() {
  const cfg = controls();
  if (!cfg.text.trim() || state.active !== null) return;
  const sampleRate = RATES[cfg.codec];
  // A new utterance: the panel and the note show only what belongs to it.
  notes.set("utterance", null);
  panel.reset();
  let audioReady;
  try {
    audioReady = player.ensureAudio(sampleRate); // synchronously, inside the click: the gesture unlocks audio
  } catch (err) {
    notes.set("utterance", `no audio: ${err.message || err}`);
    return;
  }
  const speakAt = now();
  const id = `ctx-${++nextId}`;
  state.current = id;
  state.active = id;
  highlighter.reset(id);
  state.contexts[id] = { speakAt, firstAudioMs: null };
  state.firstAudioMs = null;
  syncControls();
  try {
    const ac = await audioReady;
    if (ac.sampleRate !== sampleRate) {
      // The page never resamples: the session must run at the rate the browser gave the AudioContext.
      throw new Error(`this browser runs audio at ${ac.sampleRate} Hz, not ${sampleRate} Hz`);
    }
    await ensureSession(cfg, sampleRate);
  } catch (err) {
    notes.set("utterance", String(err.message || err));
    state.errors.push({ message: String(err.message || err) });
    endUtterance(id);
    return;
  }
  if (state.active !== id) return; // cut off while the session was starting
  const open = { type: C.CONTEXT_OPEN, context_id: id, voice: cfg.voice || undefined };
  if (cfg.language && cfg.language !== "auto") open.language = cfg.language;
  if (cfg.instruct) open.instruct = cfg.instruct;
  send(open);
  plot.mark((now() - t0) / 1000, "start");
  log(`speak ${id}: ${cfg.mode === "words" ? `${cfg.wps} words/s` : "all at once"}, ${cfg.codec}, ${cfg.pacing}`);
  if (cfg.mode === "all") {
    send({ type: C.TEXT_APPEND, context_id: id, text: cfg.text });
    send({ type: C.CONTEXT_END, context_id: id });
    return;
  }
  const words = cfg.text.match(/\S+\s*/g) || [];
  let i = 0;
  const step = () => {
    if (state.active !== id) return;
    send({ type: C.TEXT_APPEND, context_id: id, text: words[i++] });
    if (i < words.length) streamTimer = setTimeout(step, 1000 / cfg.wps);
    else send({ type: C.CONTEXT_END, context_id: id });
  };
  step();
}

function stop() {
  if (state.active === null) return;
  // The render clock at the click, so tests can measure how fast the tap goes silent.
  state.stopFrame = player.ac ? Math.round(player.ac.currentTime * player.ac.sampleRate) : null;
  highlighter.finish(true); // the mark stays on the word the listener was hearing
  endUtterance(state.active);
  player.stop(++cancelSeq);
  plot.mark((now() - t0) / 1000, "cancel", { label: "stop" });
  log("stop (barge-in)");
}

function send(msg) {
  player.post({ type: "send", msg });
}

function onWorker(m) {
  if (m.type === "report") onReport(m.report, m.stats);
  else if (m.type === "server") onServer(m.msg);
  else if (m.type === "event") onEvent(m.event, m.t);
  else if (m.type === "cancelled") state.cancels.push(m);
  else if (m.type === "closed" || m.type === "socket-error") {
    state.connected = false;
    sessionKey = null;
    $("conn").textContent = m.type === "closed" ? `closed ${m.code}` : "socket error";
    $("conn").classList.remove("on");
    const why = `connection ${m.type} ${m.code || ""} ${m.reason || ""}`.trim();
    if (state.onFailed) state.onFailed(new Error(why));
    else if (state.active !== null) notes.set("utterance", why); // cut off mid-utterance
    endUtterance(state.active);
    log(`${m.type} ${m.code || ""} ${m.reason || ""}`);
  } else if (m.type === "decoder-error") {
    state.errors.push(m);
    log(`decoder error: ${m.message}`);
  } else if (m.type === "tap" || m.type === "record") inspector.answer(m);
}

function onServer(msg) {
  state.counts[msg.type] = (state.counts[msg.type] || 0) + 1;
  const c = state.contexts[msg.context_id];
  if (msg.type === S.SESSION_STARTED) {
    state.session = msg;
    state.connected = true;
    state.serverStalls = [];
    state.targetMs = msg.pacing.target_buffer_ms;
    $("conn").textContent = `${msg.engine} · ${msg.audio.codec} ${msg.audio.sample_rate / 1000} kHz`;
    $("conn").classList.add("on");
    log(`session ${msg.session_id} (${msg.engine}, ${msg.pacing.mode}, target ${msg.pacing.target_buffer_ms} ms)`);
    if (msg.timestamps_unavailable) log(wordsUnavailable($("words-on"), msg.timestamps_unavailable));
    state.onFailed = null;
    state.onStarted(msg);
  } else if (msg.type === S.CONTEXT_STARTED && c) {
    c.started = msg;
    highlighter.started(msg, state.session.audio.sample_rate);
    if (isCurrent(msg.context_id)) panel.causes([]);
  } else if (msg.type === S.CONTEXT_DONE && c) {
    c.done = msg;
    if (isCurrent(msg.context_id)) panel.firstServer(msg);
    log(`done ${msg.context_id}: ${(msg.usage.audio_ms / 1000).toFixed(1)} s audio, stalls ${msg.stalls.events}`);
    if (state.report && playedOut(c, state.report)) endUtterance(msg.context_id);
  } else if (msg.type === S.TIMESTAMPS) {
    highlighter.add(msg);
  } else if (msg.type === S.CONTEXT_CANCELLED && c) {
    c.cancelled = msg;
    if (msg.context_id === state.active) highlighter.finish(true);
    endUtterance(msg.context_id); // (Stop ended it already; this is a cancel the page did not ask for)
    log(`cancelled ${msg.context_id} at pts ${msg.cancel_pts}, dropped ${msg.dropped_samples} samples`);
  } else if (msg.type === S.STALL) {
    state.serverStalls.push(msg);
    plot.label(msg.cause);
    if (isCurrent(msg.context_id)) panel.causes(state.serverStalls.filter((s) => s.context_id === msg.context_id));
    log(`stall ${Math.round(msg.duration_ms)} ms in ${msg.context_id}: ${msg.cause}`);
  } else if (msg.type === S.METRICS) {
    state.targetMs = msg.target_ms;
  } else if (msg.type === S.SESSION_DRAINING) {
    log(`the server is shutting down: what is playing may finish within ${msg.grace_ms} ms`);
  } else if (msg.type === S.ERROR || msg.type === S.WARNING) {
    state.errors.push(msg);
    log(`${msg.type} ${msg.code}: ${msg.message}`);
    // The active utterance's problem (its own, or the session's while it speaks) stays shown until the next one.
    const mine = msg.context_id ? msg.context_id === state.active : state.active !== null;
    if (mine) notes.set("utterance", `${msg.code}: ${msg.message}`);
    if (msg.type === S.ERROR && state.onFailed && !state.connected) {
      sessionKey = null; // the session did not start (e.g. unsupported): the next Speak tries afresh
      state.onFailed(new Error(msg.message));
    }
  }
}

function isCurrent(id) {
  return id !== undefined && id === state.current;
}

/** The context's audio has all come out of the player (the utterance is over). */
function playedOut(c, report) {
  return c.done && report.played_pts >= c.done.end_pts;
}

function onEvent(ev, t) {
  state.events.push({ ...ev, t });
  const c = state.current && state.contexts[state.current];
  if (ev.kind === "start" && c && c.started && c.firstAudioMs === null && ev.pts >= c.started.start_pts) {
    c.firstAudioMs = t - c.speakAt;
    state.firstAudioMs = c.firstAudioMs;
    panel.firstHeard(c.firstAudioMs);
  }
  if (ev.kind === "stall") plot.mark((t - t0) / 1000, "stall");
  else if (ev.kind === "resume" || ev.kind === "cancel") plot.endStall((t - t0) / 1000);
}

function onReport(r, stats) {
  state.report = r;
  state.stats = stats;
  highlighter.onReport(r);
  const rate = state.session ? state.session.audio.sample_rate : 24000;
  const bufferMs = (r.buffered_samples / rate) * 1000;
  plot.add((now() - t0) / 1000, bufferMs, state.targetMs);
  $("s-state").textContent = r.state;
  const c = state.current && state.contexts[state.current];
  const received = c && c.started ? stats.by_ctx[c.started.ctx] : undefined;
  panel.report(r, c, { rate, targetMs: state.targetMs, received });
  const active = state.active && state.contexts[state.active];
  if (active && playedOut(active, r)) endUtterance(state.active);
}

function init() {
  wireSamples($, syncControls);
  const noOpus = (why) => {
    $("codec").querySelector('option[value="opus"]').disabled = true;
    if ($("codec").value === "opus") $("codec").value = "pcm_s16le";
    notes.set("codec", `${why}: PCM only.`);
  };
  if (!canOpus) noOpus("WebCodecs AudioDecoder is missing here");
  else {
    AudioDecoder.isConfigSupported({ codec: "opus", sampleRate: 48000, numberOfChannels: 1 })
      .then((r) => r.supported || noOpus("this browser's AudioDecoder has no Opus"))
      .catch(() => noOpus("this browser's AudioDecoder has no Opus"));
  }
  for (const k of ["codec", "pacing", "target", "mode", "wps"]) if (params.get(k)) $(k).value = params.get(k);
  if ($("codec").value === "opus" && !canOpus) $("codec").value = "pcm_s16le";
  $("voice").onchange = () => fillLanguages($);
  $("speak").onclick = speak;
  $("text").oninput = syncControls;
  wireClonePanel($, params.get("token"), async (voice) => {
    await loadVoices();
    $("voice").value = voice.id;
    fillLanguages($);
    log(`voice ${voice.id} uploaded`);
  });
  $("stop").onclick = stop;
  syncControls();
  plot.render();
  return loadVoices().catch((err) => {
    notes.set("voices", `could not load voices: ${err}`);
  });
}

window.voxgate = {
  state,
  words: highlighter,
  ready: init(),
  samples: SAMPLES,
  tap: () => inspector.tap(state.events),
  record: () => inspector.record(),
};
