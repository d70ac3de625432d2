// The jitter buffer of the player: a growable float32 ring on the track's timeline (pts), with the playback
// policy in one place. Pure: no DOM, no Web Audio, no timers; time is the number of samples read. The worklet
// calls read() once per render quantum; tests drive it directly or inside an OfflineAudioContext.
//
// Policy:
// - Preroll: playback starts once `target` samples are buffered, or an end (a context's LAST frame or a flush
//   point) has been written, or data has waited `prerollTimeout` samples of audio time without a new write.
// - At an end the buffer goes idle when it runs dry: silence there is not a stall. An end written after the
//   buffer ran dry (an empty LAST frame: the server learned of the end after the audio went out) ends the stall
//   uncounted.
// - Anywhere else running dry is a stall: silence is inserted, faded out over `fade` samples; playback resumes
//   as soon as `resume` samples (or an end) are buffered, fading in. A stall is counted when it ends, with its
//   length, so a report that shows a new event also shows its full gap.
// - Holes in pts (DISCONT, after a cancel) are jumped, never filled; overlaps are dropped.
// - cancel() fades out over `fade` samples and drops everything else; the next write sets the position.

const IDLE = "idle";
const PLAYING = "playing";
const STALLED = "stalled";

export class JitterBuffer {
  #buf;
  #readTotal = 0; // samples ever read from the ring (ring index = total % capacity)
  #writeTotal = 0;
  #segments = []; // [{total, pts}]: pts of the sample at ring total `total`, one entry per pts jump
  #ends = []; // ring totals where a context or a flush ends
  #resync = true;
  #state = IDLE;
  #gap = 0; // samples of the stall in progress
  #stallPts = 0; // pts where the stall in progress began
  #sinceWrite = 0;
  #fadeIn = 0;
  #fadeOut = 0;
  #fadeOutLen = 0;
  #maxCapacity;

  /**
   * @param {{sampleRate: number, targetMs?: number, fadeMs?: number, resumeMs?: number,
   *          prerollTimeoutMs?: number, maxSeconds?: number}} opts
   * @param {(kind: string, pts: number, offset: number) => void} [onEvent] called on start, stall, resume, idle
   *   and cancel, with the event's offset in the current read() call's output (0 outside read())
   */
  constructor(opts, onEvent = () => {}) {
    const { sampleRate, targetMs = 150, fadeMs = 5, resumeMs = 0, prerollTimeoutMs = 250, maxSeconds = 120 } = opts;
    if (!(sampleRate >= 3000 && sampleRate <= 768000)) throw new Error("invalid sample rate");
    if (!(targetMs >= 0)) throw new Error("invalid target");
    this.sampleRate = sampleRate;
    this.setTarget(targetMs);
    this.fade = Math.max(1, Math.round((fadeMs * sampleRate) / 1000));
    this.resume = Math.max(1, Math.round((resumeMs * sampleRate) / 1000));
    this.prerollTimeout = Math.round((prerollTimeoutMs * sampleRate) / 1000);
    this.#maxCapacity = 2 ** Math.ceil(Math.log2(maxSeconds * sampleRate));
    this.#buf = new Float32Array(Math.min(2 ** Math.ceil(Math.log2(sampleRate * 2)), this.#maxCapacity));
    this.onEvent = onEvent;
    this.underruns = { events: 0, samples: 0, maxGapSamples: 0 };
    this.overflowSamples = 0;
  }

  setTarget(targetMs) {
    this.target = Math.round((targetMs * this.sampleRate) / 1000);
  }

  get state() {
    return this.#state;
  }

  get buffered() {
    return this.#writeTotal - this.#readTotal - this.#fadeOut;
  }

  /** pts of the next sample to play (the played position). */
  get playedPts() {
    return this.#ptsAt(this.#readTotal);
  }

  /** Cumulative underruns as the protocol's `playback.underruns`, including a stall in progress. */
  get underrunReport() {
    const u = this.underruns;
    const gap = this.#state === STALLED ? this.#gap : 0;
    const report = {
      events: u.events,
      samples: u.samples,
      max_gap_ms: (Math.max(u.maxGapSamples, gap) * 1000) / this.sampleRate,
    };
    // Where the latest finished stall began: lets the server attribute it exactly (docs/protocol.md, Stalls).
    if (u.lastPts !== undefined) report.last_pts = u.lastPts;
    return report;
  }

  /** Append `samples` whose first sample is at `pts`; `last` marks a context's end. */
  write(samples, pts, last = false) {
    if (this.#resync || this.#segments.length === 0) {
      this.#segments.push({ total: this.#writeTotal, pts });
      this.#resync = false;
    } else {
      const expected = this.#ptsAt(this.#writeTotal);
      if (pts > expected) {
        this.#segments.push({ total: this.#writeTotal, pts });
      } else if (pts < expected) {
        const skip = expected - pts;
        if (skip >= samples.length) return;
        samples = samples.subarray(skip);
      }
    }
    this.#reserve(samples.length);
    const cap = this.#buf.length;
    const at = this.#writeTotal % cap;
    const first = Math.min(samples.length, cap - at);
    this.#buf.set(samples.subarray(0, first), at);
    if (first < samples.length) this.#buf.set(samples.subarray(first), 0);
    this.#writeTotal += samples.length;
    this.#sinceWrite = 0;
    if (last) this.#ends.push(this.#writeTotal);
  }

  /** A flush point at `pts`: the audio before it is complete for now, so silence after it is not a stall. */
  markEnd(pts) {
    const seg = this.#segments[this.#segments.length - 1];
    if (!seg || this.#resync) return;
    this.#ends.push(seg.total + (pts - seg.pts));
  }

  /** Fade out and drop everything buffered. Returns the pts where the audio stops (after the fade). */
  cancel() {
    if (this.#state === STALLED) this.#endStall();
    const f = this.#state === PLAYING ? Math.min(this.fade, this.#writeTotal - this.#readTotal - this.#fadeOut) : 0;
    if (this.#fadeOut === 0) {
      this.#fadeOut = f;
      this.#fadeOutLen = f;
      this.#writeTotal = this.#readTotal + f;
    } else {
      this.#writeTotal = this.#readTotal + this.#fadeOut;
    }
    const cancelPts = this.#ptsAt(this.#writeTotal);
    this.#ends = [];
    this.#resync = true;
    this.#state = IDLE;
    this.onEvent("cancel", cancelPts, 0);
    return cancelPts;
  }

  /** After a cancel, before the next write: the server's cancel point. The hole up to it will never be played,
   * so the played position moves there (the server paces on it; left behind, it would hold the next context). */
  skip(pts) {
    if (this.#resync && pts > this.#ptsAt(this.#writeTotal)) this.#segments.push({ total: this.#writeTotal, pts });
  }

  /** Fill `out` with the next samples (zeros where there is nothing to play). Returns the audio samples written. */
  read(out) {
    const n = out.length;
    let i = 0;
    let played = 0;
    if (this.#fadeOut > 0) {
      const k = Math.min(n, this.#fadeOut);
      for (let j = 0; j < k; j++) {
        out[j] = this.#at(this.#readTotal + j) * ((this.#fadeOut - j - 1) / this.#fadeOutLen);
      }
      this.#readTotal += k;
      this.#fadeOut -= k;
      i = played = k;
    }
    while (i < n) {
      const avail = this.#writeTotal - this.#readTotal - this.#fadeOut;
      if (this.#state === IDLE) {
        if (avail > 0 && (avail >= this.target || this.#endWritten() || this.#sinceWrite >= this.prerollTimeout)) {
          this.#state = PLAYING;
          this.onEvent("start", this.playedPts, i);
        } else {
          if (avail > 0) this.#sinceWrite += n - i;
          break;
        }
      } else if (this.#state === STALLED) {
        if (avail === 0 && this.#atEnd()) {
          // The end came after the audio ran out (an empty LAST frame): that silence was no stall.
          this.#gap = 0;
          this.#state = IDLE;
          this.onEvent("idle", this.playedPts, i);
          break;
        }
        if (avail >= this.resume || (avail > 0 && this.#endWritten())) {
          this.#endStall();
          this.#state = PLAYING;
          this.#fadeIn = this.fade;
          this.onEvent("resume", this.playedPts, i);
        } else {
          this.#gap += n - i;
          break;
        }
      }
      const k = Math.min(n - i, avail);
      for (let j = 0; j < k; j++) out[i + j] = this.#at(this.#readTotal + j);
      for (let j = 0; this.#fadeIn > 0 && j < k; j++, this.#fadeIn--) {
        out[i + j] *= 1 - this.#fadeIn / (this.fade + 1);
      }
      this.#readTotal += k;
      i += k;
      played += k;
      this.#pruneEnds();
      if (k === avail && !this.#atEnd()) {
        // Ran dry (or will be, at the next quantum, unless a frame arrives in between): the samples already
        // handed to the device cannot be faded later, so fade the tail now and fade in whatever comes next.
        const f = Math.min(k, this.fade);
        for (let j = 0; j < f; j++) out[i - f + j] *= (f - j - 1) / f;
        if (f > 0) this.#fadeIn = this.fade;
      }
      if (i < n) {
        if (this.#atEnd()) {
          this.#state = IDLE;
          this.onEvent("idle", this.playedPts, i);
        } else {
          this.#state = STALLED;
          this.#gap = 0;
          this.#stallPts = this.playedPts;
          this.onEvent("stall", this.playedPts, i);
        }
      }
    }
    out.fill(0, i);
    this.#pruneEnds();
    this.#pruneSegments();
    return played;
  }

  #endStall() {
    const u = this.underruns;
    u.events += 1;
    u.samples += this.#gap;
    u.maxGapSamples = Math.max(u.maxGapSamples, this.#gap);
    u.lastPts = this.#stallPts;
    this.#gap = 0;
  }

  #atEnd() {
    return this.#ends.length > 0 && this.#ends[0] === this.#readTotal;
  }

  #endWritten() {
    for (const e of this.#ends) if (e > this.#readTotal && e <= this.#writeTotal) return true;
    return false;
  }

  #pruneEnds() {
    while (this.#ends.length > 0 && this.#ends[0] < this.#readTotal) this.#ends.shift();
  }

  #pruneSegments() {
    while (this.#segments.length > 1 && this.#segments[1].total <= this.#readTotal) this.#segments.shift();
  }

  #ptsAt(total) {
    let seg = null;
    for (const s of this.#segments) if (s.total <= total) seg = s;
    return seg ? seg.pts + (total - seg.total) : 0;
  }

  #at(total) {
    return this.#buf[total % this.#buf.length];
  }

  #reserve(n) {
    const used = this.#writeTotal - this.#readTotal;
    if (used + n <= this.#buf.length) return;
    let cap = this.#buf.length;
    while (cap < used + n && cap < this.#maxCapacity) cap *= 2;
    if (cap !== this.#buf.length) {
      const next = new Float32Array(cap);
      for (let t = this.#readTotal; t < this.#writeTotal; t++) next[t % cap] = this.#at(t);
      this.#buf = next;
    }
    const over = used + n - this.#buf.length;
    if (over > 0) {
      // Past the cap: drop the oldest audio (a runaway sender), counted, never silently.
      this.#readTotal += over;
      this.overflowSamples += over;
    }
  }
}
