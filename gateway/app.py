"""The Starlette app: routes, and a lifespan that starts and stops the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket
from voxgate.engine.base import Engine
from voxgate.gateway.audio.frames import configure_opus_pool
from voxgate.gateway.http.agent_check import serve_agent
from voxgate.gateway.http.speech_ws import speech_websocket
from voxgate.gateway.session.endpoint import tts_websocket
from voxgate.gateway.session.state import GatewayState
from voxgate.gateway.transport.gc_tuning import GcTuning
from voxgate.gateway.transport.guard import BrowserGuard
from voxgate.gateway.transport.loop_lag import watch_loop_lag

from .config import GatewayConfig
from .http import endpoints as http_api
from .http import voices_api

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
WEB_SUFFIXES = {".html", ".js", ".css", ".svg", ".png", ".ico", ".json"}
log = logging.getLogger("voxgate")


class WebAssets(StaticFiles):
    """The demo's files, and nothing else of the package directory (no .py, no __pycache__)."""

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        if path not in ("", ".") and Path(path).suffix not in WEB_SUFFIXES:
            return "", None
        return super().lookup_path(path)


async def unknown_websocket_path(websocket: WebSocket) -> None:
    """A handshake for a path with no WebSocket endpoint: HTTP 404 (Starlette's default close reads as a 403, the
    answer of an Origin refusal, which sent people hunting for a guard that never ran)."""
    message = f"no WebSocket endpoint at {websocket.url.path}; the gateway's is /v1/tts/ws"
    response = JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": "not_found"}},
                            status_code=404)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:  # a server without the denial extension can only refuse (403)
        await websocket.close(code=1008, reason="not_found")


async def load_uploaded_voices(state: GatewayState) -> None:
    """Once the engine is warm: the voices stored under voices_dir into it (POST /v1/voices, voices/store.py)."""
    if state.voices is None:
        return
    if state.engine.supports_voice_upload:
        count = await asyncio.to_thread(state.voices.load)
        log.info("%d uploaded voice(s) loaded from %s", count, state.voices.directory)
    else:
        log.warning("voices_dir is set, but the %s engine takes no uploaded voices", state.engine.name)


def create_app(engine: Engine, config: GatewayConfig | None = None) -> Starlette:
    config = config or GatewayConfig()
    state = GatewayState(engine, config)

    def gc_pass(generation: int, seconds: float, collected: int) -> None:
        state.metrics.gc_pause.labels(str(generation)).observe(seconds)
        state.metrics.gc_collected.labels(str(generation)).inc(collected)

    def speaking() -> bool:
        return state.drain.http_streams > 0 or state.metrics.contexts_active_now() > 0

    gc_tuning = GcTuning(config.gc_gen0_threshold, config.gc_freeze, gc_pass, config.gc_collect,
                         config.gc_busy_limit, speaking)

    async def engine_ready() -> None:
        """Called once the engine is warm: the collector's settings (freezing what the load made) from then on."""
        log.info("engine %s ready", engine.name)
        await load_uploaded_voices(state)  # the stored voices need the engine's encoders
        gc_tuning.apply()

    app_state = {"on_ready": engine_ready}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # `voxgate serve` starts the engine itself, behind the listening socket (/health says 503 meanwhile) and
        # calls on_ready; an app served otherwise (tests, embedding) starts it here.
        if not engine.ready and not getattr(_app.state, "engine_started_outside", False):
            log.info("starting engine %s", engine.name)
            await engine.start()
        if engine.ready:
            await engine_ready()
        configure_opus_pool(config.opus_threads)

        def observe_lag(lag_s: float) -> None:
            state.metrics.loop_lag.observe(lag_s)
            state.loop_lags.add(lag_s)

        lag_watch = asyncio.get_running_loop().create_task(watch_loop_lag(observe_lag))
        agent = await serve_agent(state, config.host, config.agent_port) if config.agent_port else None
        try:
            yield
        finally:
            if agent is not None:
                agent.close()
            lag_watch.cancel()
            gc_tuning.undo()
            await engine.stop()

    routes = [
        WebSocketRoute("/v1/tts/ws", tts_websocket),
        Route("/v1/audio/speech", http_api.speech, methods=["POST"]),
        WebSocketRoute("/v1/audio/speech/ws", speech_websocket),
        Route("/v1/voices", http_api.voices, methods=["GET"]),
        Route("/v1/voices", voices_api.create, methods=["POST"]),
        Route("/v1/voices/{voice_id}", voices_api.one, methods=["GET", "DELETE"]),
        Route("/v1/audio/voices", http_api.audio_voices),
        Route("/v1/models", http_api.models),
        Route("/health", http_api.health),
        Route("/health/load", http_api.health_load),
        Route("/metrics", http_api.metrics),
        WebSocketRoute("/{path:path}", unknown_websocket_path),  # (matches WebSocket handshakes only)
    ]
    if config.serve_demo and WEB_DIR.is_dir():
        routes.append(Mount("/", WebAssets(directory=WEB_DIR, html=True), name="web"))
    guard = Middleware(BrowserGuard, config=config, metrics=state.metrics)
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard])
    app.state.voxgate = state
    app.state.on_engine_ready = app_state["on_ready"]
    return app
