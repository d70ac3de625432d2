// The voice and language lists, from GET /v1/voices.

/** Fills the voice list (selecting `preferred`, else the server's default) and the selected voice's languages. */
export async function fillVoices($, token, preferred) {
  const res = await fetch("/v1/voices", token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  const body = await res.json();
  const sel = $("voice");
  sel.replaceChildren();
  for (const v of body.voices) {
    const opt = new Option(v.name && v.name !== v.id ? `${v.name} (${v.id})` : v.id, v.id);
    opt.dataset.languages = JSON.stringify(v.languages || []);
    if (v.description) opt.title = v.description;
    sel.append(opt);
  }
  sel.value = preferred || body.default || (body.voices[0] && body.voices[0].id);
  fillLanguages($);
}

/** The selected voice's languages, after "auto". */
export function fillLanguages($) {
  const opt = $("voice").selectedOptions[0];
  const langs = opt ? JSON.parse(opt.dataset.languages) : [];
  $("language").replaceChildren(new Option("auto", "auto"), ...langs.map((l) => new Option(l, l)));
}
