"""Settings of one-click unsubscribe (``[unsubscribe]``, docs/unsubscribe.md): where the
signed links point, which environment variable holds their secret, and which mail
carries the ``List-Unsubscribe`` headers (RFC 8058)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidings.config.providers import HttpUrlStr

#: Hosts a link may reach over plain http (a test or a trial on one machine).
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class UnsubscribeSettings(BaseModel):
    """One-click unsubscribe links in campaign email. Off until ``base_url`` is set; then
    every email of a campaign carries ``List-Unsubscribe`` (the signed HTTPS link, and
    ``mailto`` when set) and ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``,
    unless the campaign is in ``skip_campaigns``; mail sent by ``notify`` carries them
    only when its template is in ``notify_templates``. The secret is never in the file:
    ``secret_env`` names the environment variable that holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    base_url: HttpUrlStr | None = None
    """The API's public URL as recipients reach it (``https://notify.example.com``): a
    link is ``<base_url>/v1/unsubscribe/<token>``. https, except for a loopback host.
    None: no headers."""
    secret_env: str = Field(default="TIDINGS_UNSUBSCRIBE_SECRETS", min_length=1)
    """Holds the signing secret; two comma-separated during a rotation (the first signs,
    either verifies). With ``base_url`` set and this variable empty, start-up is refused."""
    mailto: str | None = Field(default=None, min_length=3, max_length=254)
    """An address that takes unsubscribe requests by mail (``unsubscribe@example.com``),
    offered beside the link, with the token in the subject; None: the link alone."""
    campaigns: bool = True
    """Whether campaign email carries the headers (each campaign, unless skipped)."""
    skip_campaigns: list[str] = Field(default_factory=list)
    """Campaigns whose email carries no headers (a receipt run, a security notice)."""
    notify_templates: list[str] = Field(default_factory=list)
    """Templates whose email sent by ``notify`` carries the headers, by name
    (``welcome``) or id (``welcome/v2``); ``"*"``: every one. Transactional mail carries
    none by default."""

    @field_validator("base_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme != "https" and (parts.hostname or "") not in LOOPBACK:
                raise ValueError("must be an https URL (RFC 8058); plain http only for "
                                 "a loopback host")
            if parts.query or parts.fragment:
                raise ValueError("must have no query or fragment: the token is appended")
        return value

    @field_validator("mailto")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and (not value.isascii() or "@" not in value
                                  or any(c in value for c in " <>,?\r\n\t")):
            raise ValueError("must be a plain ASCII email address such as "
                             "'unsubscribe@example.com'")
        return value

    @property
    def enabled(self) -> bool:
        """Whether any mail is to carry the headers."""
        return self.base_url is not None
