// What the page says about now: the live panel's figures, each one the current utterance's (reset to "—" when an
// utterance starts, filled in as its facts arrive), and the note, which holds only what is still so.

export const UNKNOWN = "—";
const FIGURES = ["s-first", "s-first-server", "s-buffer", "s-played", "s-stalls", "s-causes", "s-bytes"];

export class UtterancePanel {
  /** @param {(id: string) => HTMLElement} $ */
  constructor($) {
    this.$ = $;
    this.reset();
  }

  #show(id, text, title = "") {
    const el = this.$(id);
    el.textContent = text;
    el.title = title;
  }

  /** A new utterance: every figure is unknown again. */
  reset() {
    for (const id of FIGURES) this.#show(id, UNKNOWN);
    this.base = null; // the player's cumulative underruns when this utterance's audio began
    this.seen = null;
    this.maxGapMs = 0;
  }

  /** From the click to the first sample out of the player. */
  firstHeard(ms) {
    this.#show("s-first", `${Math.round(ms)} ms`);
  }

  /** The server's `context.done.timing.first_audio_ms` for this utterance. */
  firstServer(done) {
    this.#show("s-first-server", `${Math.round(done.timing.first_audio_ms)} ms`);
  }

  /** The server's `stall` messages for this utterance, by cause. */
  causes(stalls) {
    const byCause = {};
    for (const s of stalls) byCause[s.cause] = (byCause[s.cause] || 0) + 1;
    this.#show("s-causes", Object.entries(byCause).map(([k, v]) => `${k} ${v}`).join(", ") || "none");
  }

  /**
   * A playback report, once the utterance's context has started (before that its figures stay unknown).
   * @param {object} r the worklet's report (cumulative underruns over the session)
   * @param {object} c the utterance's context {started, done?, cancelled?}
   * @param {{rate: number, targetMs: number, received: {frames: number, bytes: number}|undefined}} at
   */
  report(r, c, { rate, targetMs, received }) {
    if (!c || !c.started) return;
    this.#show("s-buffer", `${Math.round((r.buffered_samples / rate) * 1000)} / ${Math.round(targetMs)} ms`);
    const start = c.started.start_pts;
    const end = c.cancelled ? c.cancelled.played_pts : c.done ? c.done.end_pts : Infinity;
    const played = Math.max(0, Math.min(r.played_pts, end) - start);
    this.#show("s-played", `${(played / rate).toFixed(1)} s`);
    this.#countStalls(r.underruns, rate);
    if (received) this.#show("s-bytes", `${(received.bytes / 1024).toFixed(0)} KiB`, `${received.frames} frames`);
    else this.#show("s-bytes", "0 KiB");
  }

  // The player counts stalls over the session, each when it ends (with its whole gap); this utterance's are those
  // counted since its first report, and a report that shows new stalls adds their mean gap to the maximum.
  #countStalls(u, rate) {
    if (!this.base) this.base = this.seen = { events: u.events, samples: u.samples };
    const newEvents = u.events - this.seen.events;
    if (newEvents > 0) {
      const gapMs = ((u.samples - this.seen.samples) / newEvents / rate) * 1000;
      this.maxGapMs = Math.max(this.maxGapMs, gapMs);
    }
    this.seen = { events: u.events, samples: u.samples };
    this.#show("s-stalls", `${u.events - this.base.events} · max ${Math.round(this.maxGapMs)} ms`);
  }
}

/** The note: one line per topic ("codec": this browser, "voices", "utterance": the current one's problem). */
export class Notes {
  #lines = new Map();

  constructor(el) {
    this.el = el;
  }

  /** The topic's line; null or "" removes it. */
  set(topic, text) {
    if (text) this.#lines.set(topic, text);
    else this.#lines.delete(topic);
    this.el.textContent = [...this.#lines.values()].join(" · ");
  }
}
