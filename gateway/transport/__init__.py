"""Bytes, sockets and the process: uvicorn wiring, WebSocket framing and the one writer per socket, the browser
guard and tokens, drain and shutdown, event-loop fairness and lag, GC tuning, log filters. Imports no other layer."""
