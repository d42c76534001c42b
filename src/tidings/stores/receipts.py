"""Receipts of the store's own queue (``transport = "sql"``): ``"<row id>:<receive token>"``.

The queue's adapters hand them out and read them back; the store reads them too when
a batch's acks commit with its outcomes (``Ledger.acks_commit_with``).
"""

from __future__ import annotations

from tidings.core.errors import TransportError


def parse_receipt(receipt: str) -> tuple[int, int]:
    """``"12:3"`` -> ``(12, 3)``: row id and receive token."""
    row_id, sep, token = receipt.partition(":")
    try:
        if not sep:
            raise ValueError(receipt)
        return int(row_id), int(token)
    except ValueError:
        raise TransportError(f"{receipt!r} is not a sql transport receipt") from None
