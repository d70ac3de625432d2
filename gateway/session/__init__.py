"""The WebSocket session of `/v1/tts/ws`: its endpoint, contexts (a turn each) and their producers, the text on its
way to the engine (split, streamed, rate), tracks, the pacer, stalls; and the state the app holds for all sessions."""
