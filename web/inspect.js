// What tests (and curious people) can ask the page for: the worklet's tap of exactly what it output, and the
// worker's record of every frame and message it received. Both are answered by the worker ("tap", "record").

export class Inspector {
  #seq = 0;
  #waiting = new Map(); // request id -> resolve

  /** @param {{post: (msg: object) => void}} player */
  constructor(player) {
    this.player = player;
  }

  /** The worker's answer to a request. */
  answer(m) {
    const resolve = this.#waiting.get(m.id);
    this.#waiting.delete(m.id);
    if (resolve) resolve(m);
  }

  #request(type) {
    const id = ++this.#seq;
    return new Promise((resolve) => {
      this.#waiting.set(id, resolve);
      this.player.post({ type, id });
    });
  }

  /** The worklet's tap as base64 float32 LE, with the worklet's events. */
  async tap(events) {
    const m = await this.#request("tap");
    return { b64: b64(new Uint8Array(m.samples.buffer)), sampleRate: m.sampleRate, events };
  }

  /** What the worker received (with ?record=1): frame headers, payloads (base64) and server messages. */
  async record() {
    const m = await this.#request("record");
    return {
      frames: m.record.frames.map((f) => ({ ...f.hdr, payload: b64(f.payload) })),
      messages: m.record.messages,
      stats: m.stats,
    };
  }
}

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
