"""HAProxy's agent check (`agent-check agent-port N` on a `server` line): a TCP port that answers each connection
with one line and closes. HAProxy reads `/health` for up or down; the agent line sets the backend's weight from
`/health/load`'s `load` without the session table ("up ready 70%": the engine 30 % busy; `ready` ends an earlier
drain), and says "drain" (weight 0: no new sessions, open ones go on) while a new stream would be refused, the engine
is not ready or the gateway is draining, so the balancer stops sending new sessions to a full backend before they
are refused. Config `agent_port` (0: off); docs/deploy.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from voxgate.gateway.session.load import backend_load, load_fraction

if TYPE_CHECKING:
    from voxgate.gateway.session.state import GatewayState

log = logging.getLogger("voxgate.agent")


def agent_reply(state: GatewayState) -> str:
    """The agent line for the gateway's state now."""
    if not backend_load(state)["accepting"]:
        return "drain\n"
    # Without the session table: HAProxy's leastconn counts sessions itself, and a weight from the same count would
    # count them twice, up to agent-inter late (a burst of sessions then tilts to the backend checked last).
    load = load_fraction(state, count_sessions=False)
    return f"up ready {max(1, round(100 * (1.0 - load)))}%\n"  # ready: out of an earlier drain


async def serve_agent(state: GatewayState, host: str, port: int) -> asyncio.Server:
    """Listen on host:port; every connection gets the line for that moment."""
    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(agent_reply(state).encode("ascii"))
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the checker went away first: it asks again next interval
        finally:
            writer.close()

    server = await asyncio.start_server(answer, host, port)
    log.info("HAProxy agent check on %s:%d", host, port)
    return server
