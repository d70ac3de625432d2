"""`voxgate bench`: load generation, the listener's pause rule, SLO capacity search and reports.

Modules, one noun each: `playback` (the pause rule), `workload` (texts and the length rule), `arrivals` (Poisson
schedules), `capacity` (the rate search), `client` (one request over WebSocket or HTTP), `loads` (closed and open
loop), `metrics` (the server's Prometheus text), `server` (a gateway subprocess), `environment` (commit, GPU),
`report` and `plots` (outputs), `baseline` (the qwen-tts reference arm), `suite` (the one-call GPU run), `cli`.
Nothing here imports torch or matplotlib at import time.
"""
