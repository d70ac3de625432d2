"""Voices, languages and models as clients name them: one voice rule for every door (voice_rule), OpenAI's names,
model ids, and the store of uploaded voices."""
