"""Provider webhooks: what providers report after accepting a message (delivered,
bounced, complained, failed), verified, normalized and recorded beside ``accepted``.

- ``verify``: one verifier per provider (Twilio's signature, SendGrid's signed event
  webhook, a generic HMAC, basic auth for Postmark) and ``verifiers_from`` settings;
- ``parse``: each provider's payload to ``ProviderEvent`` values;
- ``record``: once per (provider, message id, type) on the intent's timeline, or kept
  as orphaned, and the sweep that adopts orphans later;
- ``receive``: the three in order for one request;
- ``metrics``: in-process counters and the store's counts as Prometheus families.

The HTTP route is ``tidings.api.webhooks``; nothing here imports a web framework.
"""

from tidings.stores.base import ProviderEvent, ProviderEventType, RecordResult
from tidings.webhooks.parse import Parsed, parse
from tidings.webhooks.receive import WebhookOutcome, receive
from tidings.webhooks.record import adopt_orphans, record_events
from tidings.webhooks.verify import (
    SignatureError,
    Verifier,
    WebhookRequest,
    signature_header,
    twilio_signature,
    verifiers_from,
)

__all__ = [
    "Parsed",
    "ProviderEvent",
    "ProviderEventType",
    "RecordResult",
    "SignatureError",
    "Verifier",
    "WebhookOutcome",
    "WebhookRequest",
    "adopt_orphans",
    "parse",
    "receive",
    "record_events",
    "signature_header",
    "twilio_signature",
    "verifiers_from",
]
