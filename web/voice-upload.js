// Voice cloning in the demo (i16): record from the microphone or pick a file, then POST /v1/voices
// (docs/http-api.md); the panel's controls are the #clone-* elements of index.html.

/** Records the microphone with MediaRecorder (WebM/Opus or Ogg/Opus; the server decodes either with FFmpeg). */
export class MicRecorder {
  #recorder = null;
  #chunks = [];
  #stream = null;

  get recording() {
    return this.#recorder !== null;
  }

  async start() {
    this.#stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
    this.#chunks = [];
    this.#recorder = new MediaRecorder(this.#stream);
    this.#recorder.ondataavailable = (e) => e.data.size && this.#chunks.push(e.data);
    this.#recorder.start();
  }

  /** Stops and returns the recording as a Blob (its type as the browser encoded it). */
  stop() {
    const recorder = this.#recorder;
    if (!recorder) return Promise.resolve(null);
    this.#recorder = null;
    return new Promise((resolve) => {
      recorder.onstop = () => {
        for (const track of this.#stream.getTracks()) track.stop();
        resolve(new Blob(this.#chunks, { type: recorder.mimeType || "audio/webm" }));
      };
      recorder.stop();
    });
  }
}

/**
 * Uploads a recording; resolves to the voice record ({id, name, mode, ...}) or rejects with the server's message.
 * @param {Blob} audio
 * @param {{filename?: string, refText?: string, name?: string, token?: string|null}} opts
 */
export async function uploadVoice(audio, opts = {}) {
  const form = new FormData();
  form.append("file", audio, opts.filename || "recording");
  if (opts.refText) form.append("ref_text", opts.refText);
  if (opts.name) form.append("name", opts.name);
  const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
  const res = await fetch("/v1/voices", { method: "POST", body: form, headers });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = body.error || {};
    throw new Error(`${err.code || res.status}: ${err.message || res.statusText}`);
  }
  return body;
}

/**
 * Wires the clone panel: Record toggles the microphone, Upload sends the latest recording made here or file picked
 * and hands the new voice to `onUploaded`. Each button is enabled only when it can act: Record where the browser
 * can record, Upload once there is something to send; neither while an upload is under way, nor Upload while
 * recording. The note is about the latest action: a new pick clears it.
 * @param {(id: string) => HTMLElement} $
 * @param {string|null} token
 * @param {(voice: object) => Promise<void>} onUploaded
 */
export function wireClonePanel($, token, onUploaded) {
  const mic = new MicRecorder();
  const note = $("clone-note");
  let recorded = null;
  let uploading = false;
  const canRecord = typeof MediaRecorder !== "undefined" && !!navigator.mediaDevices?.getUserMedia;
  const sync = () => {
    $("clone-record").disabled = !canRecord || uploading;
    $("clone-upload").disabled = uploading || mic.recording || !(recorded || $("clone-file").files[0]);
  };
  $("clone-file").onchange = () => {
    recorded = null; // the pick is the latest choice
    note.textContent = "";
    sync();
  };
  $("clone-record").onclick = async () => {
    try {
      if (!mic.recording) {
        await mic.start();
        $("clone-record").textContent = "Stop recording";
        note.textContent = "recording: read the transcript aloud";
      } else {
        recorded = await mic.stop();
        $("clone-record").textContent = "Record";
        note.textContent = `recorded ${(recorded.size / 1024).toFixed(0)} KiB; upload it`;
      }
    } catch (err) {
      note.textContent = `no microphone: ${err.message || err}`;
    }
    sync();
  };
  $("clone-upload").onclick = async () => {
    const file = $("clone-file").files[0];
    const audio = recorded || file;
    if (!audio || uploading) return;
    note.textContent = "uploading…";
    uploading = true;
    sync();
    try {
      const voice = await uploadVoice(audio, { filename: recorded ? "recording" : file.name, token,
                                               refText: $("clone-text").value.trim(),
                                               name: $("clone-name").value.trim() });
      recorded = null;
      await onUploaded(voice);
      note.textContent = `voice ${voice.name} (${voice.mode}, ${voice.duration_s.toFixed(1)} s) selected`;
    } catch (err) {
      note.textContent = String(err.message || err);
    }
    uploading = false;
    sync();
  };
  sync();
}
