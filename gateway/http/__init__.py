"""The HTTP API: OpenAI-compatible speech (request, response, the speech WebSocket), uploaded voices, models, health
and metrics. A request flows down: checked here, its voice by voices/, spoken by the session's producer."""
