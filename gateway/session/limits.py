"""A session's explicit limits (config `limits.*`, docs/protocol.md#limits): each check raises the error its client
sees, and nothing else changes; the session calls them before it touches any state."""

from __future__ import annotations

from collections.abc import Iterable

from voxgate.gateway.config import Limits
from voxgate.gateway.protocol import ProtocolError

from .context import Context


def check_new_context(limits: Limits, context_id: str, active: int, opened: int) -> None:
    """`active` contexts are speaking now; `opened` is every context this session ever opened."""
    if active >= limits.max_contexts:
        raise ProtocolError("context_limit", f"at most {limits.max_contexts} active contexts per session",
                            context_id=context_id)
    if opened >= limits.max_session_contexts:
        raise ProtocolError("context_limit", f"this session opened limits.max_session_contexts "
                            f"({limits.max_session_contexts}) contexts; open a new session", context_id=context_id)


def check_text(limits: Limits, context_id: str, text: str) -> None:
    """One append's own size, checked before its context is opened."""
    if len(text) > limits.max_text_chars:
        raise ProtocolError("text_too_long", f"text over limits.max_text_chars ({limits.max_text_chars})",
                            context_id=context_id, param="text")


def check_buffered(limits: Limits, context_id: str, text: str, unspoken_chars: int) -> None:
    """The context's unspoken text with this append."""
    if unspoken_chars + len(text) > limits.max_buffered_text_chars:
        raise ProtocolError("text_too_long", "unspoken text over limits.max_buffered_text_chars "
                            f"({limits.max_buffered_text_chars})", context_id=context_id, param="text")


def check_flush(limits: Limits, context_id: str, flush_id: object, contexts: Iterable[Context]) -> None:
    """A flush id's length, and the flushes of all the session's contexts that still wait for their audio."""
    if isinstance(flush_id, str) and len(flush_id) > limits.max_flush_id_chars:
        raise ProtocolError("flush_limit", f"flush_id over limits.max_flush_id_chars ({limits.max_flush_id_chars})",
                            context_id=context_id, param="flush_id")
    if sum(c.pending_flushes for c in contexts if c.active) >= limits.max_pending_flushes:
        raise ProtocolError("flush_limit", f"limits.max_pending_flushes ({limits.max_pending_flushes}) "
                            "flushes already wait for their audio; the flush is dropped", context_id=context_id)
