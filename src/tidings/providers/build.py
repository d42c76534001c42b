"""The one function that builds a real provider adapter from its settings
(``tidings.config.providers``), reading its secrets from the environment."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from tidings.config.providers import (
    ENTRY_POINT_GROUP,
    PLACEHOLDER,
    AnyProviderSettings,
    HttpProviderSettings,
    PluginProviderSettings,
    PostmarkProviderSettings,
    ResendProviderSettings,
    SendGridProviderSettings,
    SmtpProviderSettings,
    TwilioProviderSettings,
)
from tidings.core.errors import ConfigurationError

if TYPE_CHECKING:
    from tidings.core.clock import Clock
    from tidings.providers.base import Provider
    from tidings.providers.httpx_lean import httpx


def build_provider_from(kind_settings: AnyProviderSettings, *, channel: str, clock: Clock,
                        client: httpx.AsyncClient | None = None,
                        env: Mapping[str, str] | None = None,
                        field_prefix: str | None = None) -> Provider:
    """Build the adapter ``kind_settings`` describes, reading its secrets from ``env``
    (default ``os.environ``). ``client`` is passed to HTTP adapters (default: their own
    aiohttp-backed transport). Errors name the field under ``field_prefix``
    (default ``channels.<channel>.provider``)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    prefix = field_prefix or f"channels.{channel}.provider"

    def secret(field: str, name: str) -> SecretStr:
        value = environ.get(name)
        if not value:
            raise ConfigurationError(f"{prefix}.{field}",
                                     f"environment variable {name} is not set")
        return SecretStr(value)

    # Each adapter is imported when its kind is built: reading settings (every process
    # does) imports no HTTP client, and a worker only the adapter its channel uses.
    match kind_settings:
        case SmtpProviderSettings() as s:
            from tidings.providers.smtp import SmtpProvider

            password = secret("password_env", s.password_env) if s.password_env else None
            return SmtpProvider(
                host=s.host, port=s.port, channel=channel, from_address=s.from_address,
                from_name=s.from_name, reply_to=s.reply_to, security=s.security,
                username=s.username, password=password, validate_certs=s.validate_certs,
                ca_file=s.ca_file, local_hostname=s.local_hostname,
                message_id_domain=s.message_id_domain, envelope_from=s.envelope_from,
                timeout_s=s.timeout_s, data_timeout_s=s.data_timeout_s,
                max_connections=s.max_connections, idle_timeout_s=s.idle_timeout_s,
                clock=clock)
        case HttpProviderSettings() as h:
            from tidings.providers.http import HttpJsonProvider, HttpLookup

            headers: dict[str, str | SecretStr] = {}
            for header, value in h.headers.items():
                names = PLACEHOLDER.findall(value)
                if not names:
                    headers[header] = value
                    continue
                found = {n: secret(f"headers.{header}", n).get_secret_value() for n in names}
                headers[header] = SecretStr(_fill(value, found))
            try:
                return HttpJsonProvider(
                    url=h.url, channel=channel, body=h.body, static=h.static, method=h.method,
                    headers=headers, idempotency_header=h.idempotency_header,
                    deduplicates=h.deduplicates, dedupe_window_s=h.dedupe_window_s,
                    lookup=HttpLookup(url=h.lookup_url, status_path=h.lookup_status_path,
                                      message_id_path=h.lookup_message_id_path
                                      or h.message_id_path,
                                      accepted=tuple(h.lookup_accepted),
                                      failed=tuple(h.lookup_failed),
                                      settle_s=h.lookup_settle_s)
                    if h.lookup_url else None,
                    message_id_path=h.message_id_path,
                    message_id_header=h.message_id_header,
                    request_id_header=h.request_id_header, client=client, clock=clock,
                    timeout_s=h.timeout_s, max_connections=h.max_connections)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{prefix}.{exc.field}", exc.message) from None
        case TwilioProviderSettings() as t:
            from tidings.providers.twilio import TwilioProvider

            return TwilioProvider(
                account_sid=t.account_sid, auth_token=secret("auth_token_env", t.auth_token_env),
                channel=channel, from_number=t.from_number,
                messaging_service_sid=t.messaging_service_sid, api_key_sid=t.api_key_sid,
                status_callback=t.status_callback, base_url=t.base_url, client=client,
                clock=clock, timeout_s=t.timeout_s, max_connections=t.max_connections)
        case SendGridProviderSettings() as g:
            from tidings.providers.sendgrid import SendGridProvider

            return SendGridProvider(
                api_key=secret("api_key_env", g.api_key_env), from_address=g.from_address,
                channel=channel, from_name=g.from_name, reply_to=g.reply_to,
                base_url=g.base_url, client=client, clock=clock, timeout_s=g.timeout_s,
                max_connections=g.max_connections)
        case PostmarkProviderSettings() as p:
            from tidings.providers.postmark import PostmarkProvider

            return PostmarkProvider(
                server_token=secret("server_token_env", p.server_token_env),
                from_address=p.from_address, channel=channel, from_name=p.from_name,
                reply_to=p.reply_to, message_stream=p.message_stream, base_url=p.base_url,
                client=client, clock=clock, timeout_s=p.timeout_s,
                max_connections=p.max_connections)
        case ResendProviderSettings() as r:
            from tidings.providers.resend import ResendProvider

            return ResendProvider(
                api_key=secret("api_key_env", r.api_key_env), from_address=r.from_address,
                channel=channel, from_name=r.from_name, reply_to=r.reply_to,
                base_url=r.base_url, client=client, clock=clock, timeout_s=r.timeout_s,
                max_connections=r.max_connections)
        case PluginProviderSettings() as plug:
            return build_plugin(plug, channel=channel, clock=clock, prefix=prefix)
    raise ConfigurationError(f"{prefix}.kind", f"unknown provider settings {kind_settings!r}")


#: What a plug-in's provider must have (``tidings.providers.Provider``).
PROVIDER_METHODS = ("send", "lookup", "close")


def plugin_field(spec: PluginProviderSettings, prefix: str) -> str:
    """The setting a plug-in's failure names: ``<prefix>.factory`` or ``.entry_point``."""
    return f"{prefix}.{'factory' if spec.factory else 'entry_point'}"


def entry_point_factory(name: str, *, field: str) -> Callable[..., Any]:
    """The factory an installed package registers as ``name`` in the ``tidings.providers``
    entry-point group, loaded (its module imported), not called."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        offered = sorted(ep.name for ep in importlib.metadata.entry_points(
            group=ENTRY_POINT_GROUP))
        raise ConfigurationError(field, f"no installed package offers {name!r} in the "
                                        f"{ENTRY_POINT_GROUP} entry points; offered: "
                                        f"{', '.join(offered) or 'none'}")
    entry = sorted(found, key=lambda ep: ep.value)[0]
    try:
        loaded = entry.load()
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(field, f"cannot load {entry.value!r} (entry point "
                                        f"{name!r}): {exc}") from None
    if not callable(loaded):
        raise ConfigurationError(field, f"entry point {name!r} ({entry.value}) is not "
                                        "callable")
    factory: Callable[..., Any] = loaded
    return factory


def plugin_factory(spec: PluginProviderSettings, *, prefix: str) -> Callable[..., Any]:
    """Import the plug-in's factory without calling it (no secret is read): every
    process checks this at start-up, a process that sends calls it when it first sends.
    A failure names ``<prefix>.factory`` (or ``<prefix>.entry_point``)."""
    field = plugin_field(spec, prefix)
    if spec.entry_point is not None:
        return entry_point_factory(spec.entry_point, field=field)
    assert spec.factory is not None  # the settings name one or the other
    module_name, _, attr = spec.factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(field, f"cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigurationError(field, f"{module_name!r} has no callable {attr!r}")
    found: Callable[..., Any] = factory
    return found


def check_provider_settings(kind_settings: AnyProviderSettings, *, channel: str,
                            prefix: str | None = None) -> None:
    """What can be checked of a provider's settings without building it, reading no
    secret (a plug-in's factory imports); the rest is checked where it is built.
    Errors name the field under ``prefix`` (default ``channels.<channel>.provider``)."""
    if isinstance(kind_settings, PluginProviderSettings):
        plugin_factory(kind_settings, prefix=prefix or f"channels.{channel}.provider")


def build_plugin(spec: PluginProviderSettings, *, channel: str, clock: Clock,
                 prefix: str) -> Provider:
    """Import the plug-in's factory and call it; every failure names
    ``<prefix>.factory`` (or ``.entry_point``)."""
    field = plugin_field(spec, prefix)
    factory = plugin_factory(spec, prefix=prefix)
    try:
        made = factory(channel=channel, clock=clock, options=dict(spec.options))
    except ConfigurationError:
        raise
    except Exception as exc:
        raise ConfigurationError(field, f"{spec.origin} raised {type(exc).__name__}: "
                                 f"{exc}") from None
    missing = [m for m in PROVIDER_METHODS if not callable(getattr(made, m, None))]
    if missing or not isinstance(getattr(made, "supports_lookup", None), bool):
        what = ", ".join(missing) or "supports_lookup (a bool)"
        raise ConfigurationError(field, f"{spec.origin} returned {type(made).__name__}, "
                                 f"which has no {what}: a provider has send, lookup, close "
                                 "and supports_lookup (tidings.providers.Provider)")
    if not isinstance(getattr(made, "name", None), str):
        raise ConfigurationError(field, f"{spec.origin} returned a provider without a name")
    provider: Provider = made
    return provider


def _fill(template: str, values: Mapping[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
