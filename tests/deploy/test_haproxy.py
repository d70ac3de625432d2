"""HAProxy from Debian in front of two `voxgate serve` processes (espeak), running deploy/haproxy/haproxy.cfg as
shipped (issue 17): 200 sessions spread evenly; a draining backend gets no new session while its own sessions
finish; a killed backend's sessions end with 1006 (the connection broke: no close frame can come from a dead
process) and new sessions go to the other backend, whose sessions never pause."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from processes import Balancer, backend, haproxy
from support import PASSAGE, ServeProcess, free_port, no_pause_from_the_server
from voxgate.client.protocol_client import SessionError, VoxgateClient

pytestmark = pytest.mark.slow
SESSIONS = 200
SHORT = "Hello through the balancer."


async def short_session(url: str, all_open: asyncio.Barrier | None = None) -> str:
    """One sentence, paced by the client (asap), once every session of `all_open` is open; the backend that
    served it."""
    async with VoxgateClient(url, pacing="asap") as client:
        if all_open is not None:
            await all_open.wait()
        result = await client.speak("s", SHORT)
        assert result.event("context.done") is not None, client.messages
        return client.ws.response.headers["X-Voxgate-Backend"]


class Listener:
    """A long session through the balancer with a simulated player (client_clock), speaking in a task."""

    def __init__(self, client: VoxgateClient) -> None:
        self.client = client
        self.backend = client.ws.response.headers["X-Voxgate-Backend"]
        self.task = asyncio.get_running_loop().create_task(client.speak("long", PASSAGE))

    @classmethod
    async def open(cls, url: str) -> Listener:
        """Once its audio flows: a session whose context has not started yet would be ended at once by a drain."""
        # 300 ms of cushion: the 2-core test machine runs both backends, HAProxy and every client at once.
        client = VoxgateClient(url, target_buffer_ms=300)
        await client.__aenter__()
        listener = cls(client)
        async with asyncio.timeout(10):
            while not client.context("long").frames:
                await asyncio.sleep(0.01)
        return listener

    async def finish(self) -> None:
        """The whole passage heard (played out of the player's buffer too) without a pause over 10 ms that the
        server caused (one this loaded client process caused by reading late is attributed and excused)."""
        result = await asyncio.wait_for(self.task, 30)
        assert result.event("context.done") is not None
        await self.client.player.drained()
        await no_pause_from_the_server(self.client)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await self.client.__aexit__()


def until_agents_answer(lb: Balancer, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while set(lb.server_status("agent_status").values()) != {"L7OK"}:
        assert time.monotonic() < deadline, lb.server_status("agent_status")
        time.sleep(0.1)


def accepted(gateway: ServeProcess) -> int:
    text = httpx.get(gateway.http_url + "/metrics", timeout=5).text
    return int(float(re.search(r"^voxgate_sessions_accepted_total (\S+)$", text, re.M).group(1)))


async def open_listeners(url: str, n: int) -> list[Listener]:
    return [await Listener.open(url) for _ in range(n)]


async def short_sessions(url: str, n: int) -> list[str]:
    """One after the other: new sessions arriving while the listeners play."""
    return [await short_session(url) for _ in range(n)]


async def test_haproxy_spreads_drains_and_survives_a_killed_backend(tmp_path: Path):
    config = tmp_path / "gateway.toml"
    config.write_text("shutdown_grace_s = 8.0\n")
    ports, agents = [free_port(), free_port()], [free_port(), free_port()]
    stack = contextlib.ExitStack()
    listeners: list[Listener] = []
    try:
        a, b = (stack.enter_context(backend(tmp_path / f"gw{k}.log", port, config, agent))
                for k, (port, agent) in enumerate(zip(ports, agents, strict=True)))
        lb = stack.enter_context(haproxy(tmp_path, ports, agents))
        # The agent check answers (weights from the load: `up N%`; drain when full: tests/deploy/test_load.py).
        await asyncio.to_thread(until_agents_answer, lb)

        # 1. 200 sessions open at once (as real sessions are: they last minutes), then each speaks a sentence:
        # least-connections gives each backend its half (within 10 %).
        t0 = time.monotonic()
        all_open = asyncio.Barrier(SESSIONS)
        served = Counter(await asyncio.gather(*(short_session(lb.ws_url, all_open) for _ in range(SESSIONS))))
        spread_s = time.monotonic() - t0
        assert sum(served.values()) == SESSIONS
        assert abs(served["gw0"] - SESSIONS / 2) <= SESSIONS / 2 * 0.10, served
        assert (accepted(a), accepted(b)) == (served["gw0"], served["gw1"])
        print(f"{SESSIONS} sessions in {spread_s:.1f} s: {dict(served)}")

        # 2. Drain gw1 (SIGTERM) while it holds live sessions: marked down, it gets no new session; its own
        # sessions finish their passage, then close 1001 `shutting_down`; gw0's never pause.
        listeners = await open_listeners(lb.ws_url, 4)
        assert {x.backend for x in listeners} == {"gw0", "gw1"}
        before = accepted(b)
        b.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(lb.wait_status, "gw1", "DOWN", 5)  # (in a thread: the listeners keep playing)
        late = await short_sessions(lb.ws_url, 10)
        assert late == ["gw0"] * 10
        assert b.proc.poll() is None, "gw1 ended before the test could check it got no new session"
        assert await asyncio.to_thread(accepted, b) == before
        for listener in listeners:
            await listener.finish()
            if listener.backend == "gw1":
                await asyncio.wait_for(listener.client.closed.wait(), 10)
                kinds = [m["type"] for m in listener.client.messages]
                assert "session.draining" in kinds and listener.client.messages[-1]["code"] == "shutting_down"
                assert listener.client.close_code == 1001
            await listener.close()
        assert await asyncio.to_thread(b.proc.wait, 10) == -signal.SIGTERM

        # 3. gw1 back: HAProxy takes it in again after 2 good checks.
        b = stack.enter_context(backend(tmp_path / "gw1-again.log", ports[1], config, agents[1]))
        lb.wait_status("gw1", "UP", 10)

        # 4. Kill gw1 (SIGKILL) mid-run: its sessions end with 1006; new sessions all go to gw0, whose sessions
        # never pause.
        listeners = await open_listeners(lb.ws_url, 4)
        assert {x.backend for x in listeners} == {"gw0", "gw1"}
        await asyncio.sleep(0.5)
        b.proc.kill()
        # (once it is gone: a handshake that raced into its listen queue in the moment it died is reset, a 502
        # that no balancer can redispatch; connects to a dead port are refused and redispatched)
        await asyncio.to_thread(b.proc.wait, 5)
        late = await short_sessions(lb.ws_url, 10)
        assert late == ["gw0"] * 10
        for listener in listeners:
            if listener.backend == "gw1":
                with pytest.raises(SessionError):
                    await asyncio.wait_for(listener.task, 10)
                assert listener.client.close_code == 1006
            else:
                await listener.finish()
            await listener.close()
        listeners = []
        assert a.proc.poll() is None and "Traceback" not in a.log_text(), a.log_text()
    finally:
        for listener in listeners:
            await listener.close()
        stack.close()
