"""ASGI helpers shared by the API's middleware and routes."""

from __future__ import annotations

from starlette.types import Message, Receive


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over ``body`` (already read in full) as the request's one
    body message, then whatever ``receive`` says next (a disconnect)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
