"""Audio in and out: the session's frames (PCM, mu-law, Opus), the HTTP containers (wav, mp3, opus, aac, flac), and
the decode of an uploaded recording."""
