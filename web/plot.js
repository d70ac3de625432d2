// The live plot: buffered audio at the player vs. the server's target, over time, with stall marks.
// Plain canvas; redrawn at most once per animation frame.

const WINDOW_S = 30;

export class BufferPlot {
  constructor(canvas) {
    this.canvas = canvas;
    this.points = []; // {t, bufferMs, targetMs}
    this.marks = []; // {t, kind: "stall"|"start"|"cancel", ms?, label?}
    this.pending = false;
  }

  clear() {
    this.points.length = 0;
    this.marks.length = 0;
    this.draw();
  }

  add(t, bufferMs, targetMs) {
    this.points.push({ t, bufferMs, targetMs });
    if (this.points.length > 4000) this.points.splice(0, 1000);
    this.draw();
  }

  mark(t, kind, extra = {}) {
    this.marks.push({ t, kind, ...extra });
    this.draw();
  }

  /** A stall drawn by mark(t, "stall") ends at t: it becomes a band. */
  endStall(t) {
    const m = this.marks.findLast((x) => x.kind === "stall");
    if (m && m.end === undefined) m.end = t;
    this.draw();
  }

  /** The server's attribution of the latest stall. */
  label(text) {
    const m = this.marks.findLast((x) => x.kind === "stall");
    if (m) m.label = m.label ? `${m.label}, ${text}` : text;
    this.draw();
  }

  draw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || c.width;
    const h = c.clientHeight || c.height;
    if (c.width !== Math.round(w * dpr)) c.width = Math.round(w * dpr);
    if (c.height !== Math.round(h * dpr)) c.height = Math.round(h * dpr);
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim();
    const pad = { l: 42, r: 10, t: 10, b: 22 };
    const last = this.points.length ? this.points[this.points.length - 1].t : 0;
    const t1 = Math.max(last, 5);
    const t0 = Math.max(0, t1 - WINDOW_S);
    let yMax = 200;
    for (const p of this.points) if (p.t >= t0) yMax = Math.max(yMax, p.bufferMs * 1.1, p.targetMs * 1.3);
    yMax = Math.min(Math.ceil(yMax / 100) * 100, 5000);
    const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (w - pad.l - pad.r);
    const y = (ms) => h - pad.b - (ms / yMax) * (h - pad.t - pad.b);

    g.font = "11px system-ui, sans-serif";
    g.fillStyle = color("--mute");
    g.strokeStyle = color("--line");
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const ms = (yMax * i) / 4;
      g.beginPath();
      g.moveTo(pad.l, y(ms) + 0.5);
      g.lineTo(w - pad.r, y(ms) + 0.5);
      g.stroke();
      g.fillText(i === 4 ? "ms" : `${Math.round(ms)}`, 4, y(ms) + 4);
    }
    for (let s = Math.ceil(t0); s <= t1; s += t1 - t0 > 12 ? 5 : 1) g.fillText(`${s}s`, x(s) - 6, h - 6);

    for (const m of this.marks) {
      if ((m.end ?? m.t) < t0) continue;
      if (m.kind === "stall") {
        g.fillStyle = color("--stall");
        g.globalAlpha = 0.18;
        g.fillRect(x(m.t), pad.t, Math.max(2, x(m.end ?? last) - x(m.t)), h - pad.t - pad.b);
        g.globalAlpha = 1;
      }
      g.strokeStyle = color(m.kind === "stall" ? "--stall" : "--start");
      g.lineWidth = m.kind === "stall" ? 2 : 1;
      g.beginPath();
      g.moveTo(x(m.t), pad.t);
      g.lineTo(x(m.t), h - pad.b);
      g.stroke();
      if (m.label) {
        g.fillStyle = g.strokeStyle;
        g.fillText(m.label, x(m.t) + 3, pad.t + 10);
      }
    }
    const line = (key, name, width) => {
      g.strokeStyle = color(name);
      g.lineWidth = width;
      g.beginPath();
      let started = false;
      for (const p of this.points) {
        if (p.t < t0) continue;
        if (started) g.lineTo(x(p.t), y(p[key]));
        else g.moveTo(x(p.t), y(p[key]));
        started = true;
      }
      g.stroke();
    };
    line("targetMs", "--target", 1.5);
    line("bufferMs", "--buf", 2);
  }
}
