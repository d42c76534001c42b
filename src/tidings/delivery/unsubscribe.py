"""One-click unsubscribe links (RFC 8058): the headers an email carries, and the secrets
that verify its token.

``UnsubscribeLinks.headers_for(intent)`` is what the send-time gate
(``tidings.delivery.compose``) puts on a rendered email's ``Content.headers``:

    List-Unsubscribe: <https://notify.example.com/v1/unsubscribe/<token>>, <mailto:…>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

the token signed for the intent's recipient id, address, channel and campaign
(``tidings.core.unsubscribe``). Campaign email carries them unless its campaign is
skipped; email sent by ``notify`` only when its template is named
(``[unsubscribe] notify_templates``). ``links_from`` builds them from settings and the
environment, and refuses (ConfigurationError naming ``unsubscribe.secret_env``)
settings that ask for links while the variable holds no secret.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote

from tidings.config.unsubscribe import UnsubscribeSettings
from tidings.core.errors import ConfigurationError
from tidings.core.model import Intent
from tidings.core.unsubscribe import Subject, secrets_from, sign, verify

LIST_UNSUBSCRIBE: Final = "List-Unsubscribe"
LIST_UNSUBSCRIBE_POST: Final = "List-Unsubscribe-Post"
ONE_CLICK: Final = "List-Unsubscribe=One-Click"
"""The value of ``List-Unsubscribe-Post``, and the body of the one-click POST."""

PATH: Final = "/v1/unsubscribe/"


@dataclass(frozen=True, kw_only=True)
class UnsubscribeLinks:
    """Signs and verifies one-click unsubscribe tokens, and says which email carries the
    headers. ``secrets``: the first signs, every one verifies."""

    base_url: str
    secrets: tuple[bytes, ...]
    mailto: str | None = None
    campaigns: bool = True
    skip_campaigns: frozenset[str] = field(default_factory=frozenset)
    notify_templates: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.secrets or not all(self.secrets):
            raise ValueError("unsubscribe links need a secret")

    def applies_to(self, intent: Intent) -> bool:
        """Whether ``intent``'s email carries the headers."""
        if intent.campaign is not None:
            return self.campaigns and intent.campaign not in self.skip_campaigns
        names = self.notify_templates
        return "*" in names or intent.template in names or (
            intent.template.split("/v", 1)[0] in names)

    def subject_of(self, intent: Intent) -> Subject:
        return Subject(recipient_id=intent.recipient_id, address=intent.address,
                       channel=intent.channel, campaign=intent.campaign or "", key=intent.key)

    def token(self, subject: Subject) -> str:
        return sign(subject, self.secrets[0])

    def url(self, token: str) -> str:
        """The one-click URL of ``token``."""
        return f"{self.base_url.rstrip('/')}{PATH}{token}"

    def headers(self, subject: Subject) -> dict[str, str]:
        """The two headers for ``subject`` (values ASCII, no line breaks)."""
        token = self.token(subject)
        targets = [f"<{self.url(token)}>"]
        if self.mailto:
            targets.append(f"<mailto:{self.mailto}?subject={quote('unsubscribe ' + token)}>")
        return {LIST_UNSUBSCRIBE: ", ".join(targets), LIST_UNSUBSCRIBE_POST: ONE_CLICK}

    def headers_for(self, intent: Intent) -> dict[str, str]:
        """The headers ``intent``'s email carries: both, or none."""
        return self.headers(self.subject_of(intent)) if self.applies_to(intent) else {}

    def verify(self, token: str) -> Subject | None:
        """Whom ``token`` unsubscribes, or None for any token not signed by us."""
        return verify(token, self.secrets)


def links_from(settings: UnsubscribeSettings, environ: Mapping[str, str]
               ) -> UnsubscribeLinks | None:
    """The links the settings ask for, the secret read from ``environ``; None when
    ``base_url`` is not set. A ConfigurationError when it is and ``secret_env`` holds
    no secret."""
    if settings.base_url is None:
        return None
    secrets: Sequence[bytes] = secrets_from(environ.get(settings.secret_env))
    if not secrets:
        raise ConfigurationError(
            "unsubscribe.secret_env",
            f"${settings.secret_env} holds no secret: unsubscribe.base_url asks for signed "
            "one-click unsubscribe links, and they cannot be signed without one (set the "
            "variable, or remove [unsubscribe] base_url to send no List-Unsubscribe "
            "headers)")
    return UnsubscribeLinks(base_url=settings.base_url, secrets=tuple(secrets),
                            mailto=settings.mailto, campaigns=settings.campaigns,
                            skip_campaigns=frozenset(settings.skip_campaigns),
                            notify_templates=frozenset(settings.notify_templates))
