"""Provider webhooks: what providers report after accepting a message (delivered,
bounced, complained, failed), verified, normalized and recorded beside ``accepted``.

- ``verify``: one verifier per provider (Twilio's signature, SendGrid's signed event
  webhook, a generic HMAC, basic auth for Postmark) and ``verifiers_from`` settings;
- ``parse``: each provider's payload to ``ProviderEvent`` values;
- ``record``: once per (provider, message id, type) on the intent's timeline, or kept
  as orphaned, and the sweep that adopts orphans later;
- ``metrics``: in-process counters and the store's counts as Prometheus families.

The three in order for one request, with the evidence they give uncertain sends, are
``tidings.recovery.provider_reports.receive``; the HTTP route is
``tidings.api.webhooks``. Nothing here imports a web framework, or a stage.
"""

from tidings.stores.base import ProviderEvent, ProviderEventType, RecordResult
from tidings.webhooks.parse import Parsed, parse
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
    "WebhookRequest",
    "adopt_orphans",
    "parse",
    "record_events",
    "signature_header",
    "twilio_signature",
    "verifiers_from",
]


#: Names this package exported before they moved up to the recovery stage.
_MOVED = {"receive": "tidings.recovery.provider_reports",
          "WebhookOutcome": "tidings.recovery.provider_reports"}


def __getattr__(name: str) -> object:
    from tidings.core.moved import moved_attribute

    return moved_attribute(__name__, name, _MOVED)
