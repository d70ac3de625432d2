// Word highlighting: the current utterance's words (the server's `timestamps` events, which come before their audio)
// shown as they arrive, the one playing marked. The position is the worklet's played position: its latest report,
// carried forward on the audio clock between reports (every feedback_interval_ms), so the mark moves within a render
// quantum or so of the audio rather than in report-sized steps.

const QUANTUM = 128; // a report's played_pts is the position after the render quantum that starts at its `frame`

export class WordHighlighter {
  /**
   * @param {HTMLElement} el where the words are shown
   * @param {() => number|null} frameNow the audio clock in frames (AudioContext.currentTime x its rate), null if none
   */
  constructor(el, frameNow) {
    this.el = el;
    this.frameNow = frameNow;
    this.reset(null);
  }

  /** A new utterance (`contextId`), or none: no words, nothing marked. */
  reset(contextId) {
    this.el.replaceChildren();
    this.contextId = contextId;
    this.startPts = null; // its context.started.start_pts: word times count from there
    this.rate = 0;
    this.words = []; // {word, start, end} in pts
    this.spans = [];
    this.index = -1; // the word marked: it only moves forward
    this.log = []; // each move of the mark (for tests): {index, frame, pts, reportFrame, held (#reach)}
    this.report = null;
    this.running = false; // the mark follows the audio on every animation frame
    this.over = false;
  }

  started(msg, rate) {
    if (msg.context_id !== this.contextId) return;
    this.startPts = msg.start_pts;
    this.rate = rate;
  }

  /** A `timestamps` event: its words, on the track's timeline. */
  add(msg) {
    if (msg.context_id !== this.contextId || this.startPts === null || this.over) return;
    const at = (ms) => this.startPts + Math.round((ms * this.rate) / 1000);
    for (const w of msg.words) {
      const span = document.createElement("span");
      span.textContent = w.word;
      this.el.append(span, " ");
      this.spans.push(span);
      this.words.push({ word: w.word, start: at(w.start_ms), end: at(w.end_ms) });
    }
    if (!this.running) {
      this.running = true;
      requestAnimationFrame(this.#frame);
    }
  }

  onReport(r) {
    this.report = r;
  }

  /** The utterance is over (played out, stopped or cut off): a last update, then the mark stays where it is. */
  finish(stopped) {
    if (this.over) return;
    if (!stopped) this.tick();
    this.running = false;
    this.over = true;
  }

  #frame = () => {
    if (!this.running) return;
    this.tick();
    requestAnimationFrame(this.#frame);
  };

  /** The worklet's position now: the last report's, plus the audio clock since, while it plays (at most what it
   * had buffered). */
  position(frame) {
    return this.#reach(frame)?.pts ?? null;
  }

  /** position(frame), and whether it stopped at what the last report knew (`held`: not playing then, or all it had
   * buffered played), where audio the worklet got since is unknown here until the next report. */
  #reach(frame) {
    const r = this.report;
    if (!r) return null;
    if (r.state !== "playing" || frame === null) return { pts: r.played_pts, held: true };
    const ahead = Math.max(0, frame - (r.frame + QUANTUM));
    return { pts: r.played_pts + Math.min(ahead, r.buffered_samples), held: ahead > r.buffered_samples };
  }

  tick() {
    const frame = this.frameNow();
    const reach = this.#reach(frame);
    if (reach === null) return;
    const { pts, held } = reach;
    let i = this.index;
    while (i + 1 < this.words.length && this.words[i + 1].start < pts) i++; // its first sample played
    if (i === this.index) return;
    if (this.index >= 0) this.spans[this.index].className = "said";
    for (let k = this.index + 1; k < i; k++) this.spans[k].className = "said";
    this.spans[i].className = "now";
    this.index = i;
    this.log.push({ index: i, frame, pts, reportFrame: this.report.frame, held });
  }
}

/** The engine measures no word times (session.started.timestamps_unavailable): the checkbox is unticked and says
 * why, so the next sessions do not ask. Returns a line for the log. */
export function wordsUnavailable(box, why) {
  box.checked = false;
  box.disabled = true;
  box.parentElement.title = `no word times: ${why}`;
  return `no word highlighting: ${why}`;
}
