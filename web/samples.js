// The demo's sample texts and the buttons that put one in the text box.

export const SAMPLES = {
  Greeting: "Hello! This is voxgate, streaming speech to your browser while the words are still arriving.",
  Passage:
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. From the top he could see the " +
    "fishing boats returning, their lamps swaying like fireflies over the dark water. He wrote the weather in " +
    "a small notebook, the wind, the clouds, the colour of the sea, and he never missed a single day. In " +
    "forty years the light had not gone out once.",
  Numbers: "Your order 4417 ships on Friday at 3.30 pm; the total is 28 dollars and 15 cents. Anything else?",
};

/** One button per sample; the Greeting starts in the box. */
export function wireSamples($, onChange) {
  for (const [name, text] of Object.entries(SAMPLES)) {
    const b = document.createElement("button");
    b.textContent = name;
    b.onclick = () => {
      $("text").value = text;
      onChange();
    };
    $("samples").append(b);
  }
  $("text").value = SAMPLES.Greeting;
}
