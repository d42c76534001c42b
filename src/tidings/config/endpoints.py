"""What the provider adapters and their settings (``providers.config``) share: each
hosted provider's default base URL and the generic HTTP body's sources.

Kept apart from the adapters so that reading settings imports no HTTP client: a worker
imports the adapter its channel names, and only that one.
"""

from __future__ import annotations

from typing import Final, Literal

POSTMARK_BASE_URL: Final = "https://api.postmarkapp.com"
RESEND_BASE_URL: Final = "https://api.resend.com"
SENDGRID_BASE_URL: Final = "https://api.sendgrid.com"
TWILIO_BASE_URL: Final = "https://api.twilio.com"

Source = Literal["key", "to", "subject", "text", "html", "template", "data", "recipient_id",
                 "channel", "headers"]
"""What a generic HTTP body field can be filled from."""
