"""The settings reference (``docs/settings.md``), generated from the settings models.

Every field of ``Settings`` and of the tables under it, with its type, its default and
its meaning: the field's docstring in the model, else its entry in ``NOTES`` (keyed
``Model.field``). A field with neither is an error, so a new setting cannot go
undocumented. Regenerate with::

    python -m tidings.config.reference docs/settings.md

and ``tests/unit/test_settings_reference.py`` fails while the page is not current.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import json
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tidings.config.settings import (
    CampaignSettings,
    ChannelSettings,
    ProviderSettings,
    QueueSettings,
    Settings,
)

#: Meanings of the fields whose model gives no docstring.
NOTES: dict[str, str] = {
    "Settings.store": "Where the ledger and the queues live: `sqlite:///tidings.db` (a path "
                      "relative to the settings file; `sqlite:////abs/path.db` absolute) or "
                      "`postgresql://user@host:5432/db`. `TIDINGS_STORE` overrides it.",
    "Settings.transport": "The queue: `sql` is a table in the store itself (intents and "
                          "their messages are written in one transaction).",
    "Settings.clock_offset_s": "Seconds added to the real clock, to simulate another time "
                               "(the demo starts just after Monday 09:00 this way). The "
                               "scheduler, workers and log lines all use the shifted time.",
    "Settings.channels": "One table per channel (`[channels.email]`), see below.",
    "Settings.campaigns": "One table per campaign (`[campaigns.weekly-digest]`), see below.",
    "Settings.retry": "Retries and backoff of every channel, see `[retry]`.",
    "Settings.worker": "Channel workers (`tidings worker`), see `[worker]`.",
    "Settings.scheduler": "Admission passes and the relay (`tidings scheduler`), see "
                          "`[scheduler]`.",
    "Settings.reconciler": "The reconciler's sweeps, see `[reconciler]`.",
    "Settings.api": "The HTTP API and dashboard (`tidings api`), see `[api]`.",
    "Settings.webhooks": "Provider delivery webhooks, see `[webhooks]`.",
    "ChannelSettings.provider": "Who sends: a table with `kind` (`sandbox`, `sandbox-twin`, "
                                "`smtp`, `http`, `twilio`, `sendgrid`, `postmark`, "
                                "`resend`), see the provider tables below. Required: a "
                                "channel without one is "
                                "refused at start-up (an application may instead hand "
                                "`build_runtime` a provider object for it). "
                                "`{ kind = \"sandbox-twin\" }` is the in-process sandbox, "
                                "which marks sends accepted and delivers nothing: for tests "
                                "and trials, never a default.",
    "ChannelSettings.quota": "The provider's quota, e.g. `100/s` or `6000/min`, shared by "
                             "every worker of the channel; the pacer aims just under it. "
                             "None: no quota.",
    "ChannelSettings.max_in_flight": "Requests in flight at once, across every worker "
                                     "process of the channel.",
    "ChannelSettings.min_interval_s": "Seconds at least between two request starts, across "
                                      "every worker of the channel.",
    "ChannelSettings.max_sms_segments": "An SMS that renders to more segments (GSM-7 or "
                                        "UCS-2) is rejected before any send.",
    "ProviderSettings.kind": "`sandbox`: the sandbox server at `url` (`tidings sandbox`); "
                             "`sandbox-twin`: the in-process sandbox (one process only), "
                             "which marks sends accepted and delivers nothing.",
    "ProviderSettings.url": "The sandbox server's base URL, e.g. `http://127.0.0.1:8025`; "
                            "required for `sandbox`.",
    "ProviderSettings.timeout_s": "Seconds a request may take; after it the send is "
                                  "uncertain and the reconciler resolves it.",
    "CampaignSettings.cron": "Five-field cron expression of the occurrences, e.g. "
                             "`0 9 * * 1` (Mondays at 09:00).",
    "CampaignSettings.timezone": "IANA time zone the cron expression is read in; an "
                                 "occurrence's logical date is local to it.",
    "CampaignSettings.channels": "Declared channels to deliver each member on (one intent "
                                 "per member and channel with an address).",
    "CampaignSettings.template": "Template name; `<name>/v<version>` is rendered at send time.",
    "CampaignSettings.version": "Template version, part of every delivery key: new words "
                                "are a new version, never an edit under one in flight.",
    "CampaignSettings.expires_after_s": "Seconds after the logical time an intent is no "
                                        "longer sent (it expires). None: never.",
    "CampaignSettings.grace_s": "Seconds after its logical time an occurrence is still "
                                "admitted on its own; older ones need `tidings replay`.",
    "CampaignSettings.audience": "Who receives it: `{ sql = { url = \"sqlite:///crm.db\", "
                                 "query = \"...\" } }` (the query pages with `:after` and "
                                 "`:limit`; columns id, email, phone, active, others are "
                                 "template data) or `{ python = \"pkg.module:function\" }` "
                                 "(a generator of recipients ordered by id).",
    "RetrySettings.max_failures": "Transient failures an intent may have; then it is "
                                  "dead-lettered with its reason (429s do not count).",
    "RetrySettings.base_s": "First backoff after a transient failure, in seconds "
                            "(exponential, full jitter).",
    "RetrySettings.cap_s": "Longest backoff after a transient failure, in seconds.",
    "RetrySettings.rate_limit_floor_s": "Shortest channel pause after a 429 without "
                                        "Retry-After, in seconds.",
    "RetrySettings.rate_limit_cap_s": "Longest channel pause after a 429 without "
                                      "Retry-After, in seconds.",
    "WorkerSettings.lease_s": "Seconds a worker's claim on an intent lasts (renewed while "
                              "it works); an expired lease makes the intent uncertain "
                              "when its send had started, and releases it for another "
                              "claim when none had.",
    "WorkerSettings.visibility_s": "Seconds a received message stays invisible to other "
                                   "workers before it is delivered again.",
    "WorkerSettings.max_receives": "The poison limit: receives that failed on the message "
                                   "itself (redeliveries after a worker died or released "
                                   "never count).",
    "WorkerSettings.reconcile_every_s": "Seconds between the reconciler sweeps a worker "
                                        "runs beside its channel (`--no-reconcile` to "
                                        "turn off).",
    "SchedulerSettings.interval_s": "Seconds between two admission passes when the last "
                                    "one left nothing to do.",
    "SchedulerSettings.relay_horizon_s": "One-off intents due within this many seconds are "
                                         "published now, delayed until due; later ones wait "
                                         "in the store.",
    "SchedulerSettings.relay_lease_s": "Seconds a pass holds intents it is publishing; "
                                       "after it the reconciler publishes them again.",
    "ReconcilerSettings.lost_after_s": "Seconds an enqueued or retryable intent may go "
                                       "unchanged before its message is looked for, and "
                                       "published again if the queue lost it (once the "
                                       "intent is due: a scheduled one is looked for "
                                       "from its due time on).",
    "ReconcilerSettings.uncertain_after_s": "Seconds an uncertain send waits before it is "
                                            "looked up at the provider (or retried where "
                                            "the provider deduplicates).",
    "ApiSettings.host": "Address `tidings api` listens on.",
    "ApiSettings.port": "Port `tidings api` listens on (0 picks a free one).",
    "ApiSettings.trigger_tolerance_s": "How far a signed trigger's timestamp may be from "
                                       "the server's clock, in seconds.",
    "ApiSettings.max_body_bytes": "Largest request body the API reads.",
    "ApiSettings.idempotency_ttl_s": "Seconds a publish's `Idempotency-Key` and its answer "
                                     "are remembered.",
    "ApiSettings.metrics_cache_s": "Seconds `/metrics` reuses its numbers between scrapes.",
    "ApiSettings.queues": "Named queues for `POST /v1/queue/publish`, one table each "
                          "(`[api.queues.<name>]`), see below.",
    "QueueSettings.campaign": "Publishes become intents of this campaign, on its channels "
                              "(addresses from the payload, else from its audience).",
    "QueueSettings.channel": "Publishes become one-off intents on this channel (the "
                             "payload carries the address and template).",
    "WebhookSettings.max_body_bytes": "Largest webhook body read.",
    "WebhookSettings.twilio": "Twilio status callbacks, see below.",
    "WebhookSettings.sendgrid": "SendGrid's event webhook, see below.",
    "WebhookSettings.postmark": "Postmark webhooks, see below.",
    "WebhookSettings.resend": "Resend webhooks (Svix signatures), see below.",
    "WebhookSettings.generic": "Any other provider, see below.",
    "PostmarkWebhookSettings.username_env": "Holds the basic-auth user name Postmark sends.",
    "PostmarkWebhookSettings.password_env": "Holds the basic-auth password Postmark sends.",
    "GenericWebhookSettings.tolerance_s": "How far the signed timestamp may be from the "
                                          "server's clock, in seconds.",
    # Provider adapters (providers/config.py).
    "SmtpProviderSettings.kind": "`smtp`.",
    "SmtpProviderSettings.host": "The relay's host name.",
    "SmtpProviderSettings.security": "`starttls` (upgrade after connecting), `tls` "
                                     "(implicit TLS) or `none`.",
    "SmtpProviderSettings.username": "Log-in name; None: no authentication.",
    "SmtpProviderSettings.password_env": "Environment variable holding the password.",
    "SmtpProviderSettings.from_address": "The From address.",
    "SmtpProviderSettings.from_name": "The From display name.",
    "SmtpProviderSettings.reply_to": "A Reply-To address.",
    "SmtpProviderSettings.envelope_from": "The envelope sender (bounces go there); "
                                          "default: `from_address`.",
    "SmtpProviderSettings.validate_certs": "Check the relay's TLS certificate.",
    "SmtpProviderSettings.local_hostname": "Name given in EHLO; default: this host's.",
    "SmtpProviderSettings.timeout_s": "Seconds to connect and for each command.",
    "SmtpProviderSettings.data_timeout_s": "Seconds for the message data to be accepted.",
    "SmtpProviderSettings.max_connections": "Connections kept to the relay per process.",
    "SmtpProviderSettings.idle_timeout_s": "Seconds an idle connection is kept open.",
    "HttpProviderSettings.kind": "`http`.",
    "HttpProviderSettings.url": "The endpoint each send is made to.",
    "HttpProviderSettings.method": "HTTP method of a send.",
    "HttpProviderSettings.idempotency_header": "Header carrying the delivery key as "
                                               "idempotency key; None: not sent.",
    "HttpProviderSettings.message_id_path": "Dotted path of the provider's message id in "
                                            "the JSON answer (the receipt).",
    "HttpProviderSettings.message_id_header": "Or a response header holding the message id.",
    "HttpProviderSettings.request_id_header": "Response header holding the provider's "
                                              "request id (logged, kept on the timeline).",
    "HttpProviderSettings.timeout_s": "Seconds a request may take before it is uncertain.",
    "HttpProviderSettings.max_connections": "Connections kept to the provider per process.",
    "TwilioProviderSettings.kind": "`twilio`.",
    "TwilioProviderSettings.account_sid": "The account SID (`AC…`).",
    "TwilioProviderSettings.auth_token_env": "Environment variable holding the auth token "
                                             "(or the API key's secret).",
    "TwilioProviderSettings.api_key_sid": "An API key SID (`SK…`) to authenticate with "
                                          "instead of the account.",
    "TwilioProviderSettings.from_number": "The sending number (E.164); or use "
                                          "`messaging_service_sid`.",
    "TwilioProviderSettings.messaging_service_sid": "A messaging service (`MG…`) to send "
                                                    "through instead of `from_number`.",
    "TwilioProviderSettings.status_callback": "URL Twilio reports delivery status to "
                                              "(`…/v1/webhooks/twilio`).",
    "TwilioProviderSettings.base_url": "The API's base URL (a test server in tests).",
    "TwilioProviderSettings.timeout_s": "Seconds a request may take before it is uncertain.",
    "TwilioProviderSettings.max_connections": "Connections kept to the API per process.",
    "SendGridProviderSettings.kind": "`sendgrid`.",
    "SendGridProviderSettings.api_key_env": "Environment variable holding the API key.",
    "SendGridProviderSettings.from_address": "The From address.",
    "SendGridProviderSettings.from_name": "The From display name.",
    "SendGridProviderSettings.reply_to": "A Reply-To address.",
    "SendGridProviderSettings.base_url": "The API's base URL (a test server in tests).",
    "SendGridProviderSettings.timeout_s": "Seconds a request may take before it is uncertain.",
    "SendGridProviderSettings.max_connections": "Connections kept to the API per process.",
    "PostmarkProviderSettings.kind": "`postmark`.",
    "PostmarkProviderSettings.server_token_env": "Environment variable holding the server "
                                                 "token.",
    "PostmarkProviderSettings.from_address": "The From address.",
    "PostmarkProviderSettings.from_name": "The From display name.",
    "PostmarkProviderSettings.reply_to": "A Reply-To address.",
    "PostmarkProviderSettings.message_stream": "The message stream to send on.",
    "PostmarkProviderSettings.base_url": "The API's base URL (a test server in tests).",
    "PostmarkProviderSettings.timeout_s": "Seconds a request may take before it is uncertain.",
    "PostmarkProviderSettings.max_connections": "Connections kept to the API per process.",
    "ResendProviderSettings.kind": "`resend`.",
    "ResendProviderSettings.api_key_env": "Environment variable holding the API key.",
    "ResendProviderSettings.from_address": "The From address (of a domain verified at "
                                           "Resend).",
    "ResendProviderSettings.from_name": "The From display name.",
    "ResendProviderSettings.reply_to": "A Reply-To address.",
    "ResendProviderSettings.base_url": "The API's base URL (a test server in tests).",
    "ResendProviderSettings.timeout_s": "Seconds a request may take before it is uncertain.",
    "ResendProviderSettings.max_connections": "Connections kept to the API per process.",
}

EXAMPLES: dict[type[BaseModel], str] = {
    ChannelSettings: "[channels.email]", CampaignSettings: "[campaigns.weekly-digest]",
    QueueSettings: "[api.queues.orders]"}

HEADER = """\
# Settings reference

<!-- Generated by `python -m tidings.config.reference docs/settings.md` from the settings
models; tests/unit/test_settings_reference.py fails while this page is not current. -->

Settings are read from a TOML file: `--config PATH`, else the `TIDINGS_CONFIG`
environment variable, else `tidings.toml` in the working directory (else every default
below). Relative paths in the file (a SQLite store or audience database, template
folders) are relative to the file's folder. `TIDINGS_STORE` overrides `store`. A bad
value is refused naming its field, e.g. `channels.email.quota: 'fast' is not a quota like
'100/s' or '6000/min'`. Secrets are never written in the file: each `*_env` field names
the environment variable that holds one.
"""


@dataclass(frozen=True)
class Section:
    """One TOML table of the reference: its path and the model that describes it."""

    path: str
    model: type[BaseModel]
    note: str = ""


def meaning(model: type[BaseModel], name: str, field: FieldInfo) -> str | None:
    """A field's docstring, else its note; None when it has neither."""
    text = field.description or _attribute_docstring(model, name) or NOTES.get(
        f"{model.__name__}.{name}")
    return _markdown(text) if text else None


def _markdown(text: str) -> str:
    """A docstring as one Markdown line (reST's double backticks become single ones)."""
    return " ".join(text.split()).replace("``", "`")


def _attribute_docstring(model: type[BaseModel], name: str) -> str | None:
    """The string literal after a field's line in its class body (as pydantic's
    ``use_attribute_docstrings`` reads it), found without changing the model's config."""
    for klass in model.__mro__:
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            found = _docstrings(klass).get(name)
            if found:
                return found
    return None


@functools.cache
def _docstrings(klass: type[BaseModel]) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    return {node.target.id: after.value.value
            for node, after in itertools.pairwise(body)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings models an annotation holds (directly, in a union, or as dict values)."""
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        item = stack.pop(0)
        if isinstance(item, type) and issubclass(item, BaseModel):
            found.append(item)
            continue
        origin = get_origin(item)
        if origin is typing.Annotated:
            stack.append(get_args(item)[0])
        elif origin in (Union, types.UnionType):
            stack.extend(get_args(item))
        elif origin is dict:
            stack.append(get_args(item)[1])
    return found


def sections() -> Iterator[Section]:
    """Every table of the settings, depth first from the top level."""
    yield Section("", Settings)
    yield from _below("", Settings)


def _below(prefix: str, model: type[BaseModel]) -> Iterator[Section]:
    for name, field in model.model_fields.items():
        inner = _models_in(field.annotation)
        if not inner:
            continue
        keyed = get_origin(field.annotation) is dict
        path = f"{prefix}{name}" + (".<name>" if keyed else "")
        for sub in inner:
            kind = _kind_of(sub) if len(inner) > 1 else None
            note = f'kind = "{kind}"' if kind else ""
            yield Section(path, sub, note)
            yield from _below(f"{path}.", sub)


def _kind_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None:
        return None
    if model is ProviderSettings:
        return "sandbox"
    return str(field.default) if field.default is not PydanticUndefined else None


def type_name(annotation: Any) -> str:
    """A field's type as a reader of the TOML file needs it."""
    origin = get_origin(annotation)
    if annotation is type(None):
        return "none"
    if origin is typing.Annotated:
        return type_name(get_args(annotation)[0])
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        models = _models_in(annotation)
        if len(models) > 1:
            return "table (by kind)"
        return " \\| ".join(type_name(a) for a in get_args(annotation))
    if origin is dict:
        return "table"
    if origin is list:
        return f"list of {type_name(get_args(annotation)[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if isinstance(value, BaseModel):
        kind = getattr(value, "kind", None)
        return "(table)" if kind is None else f'`{{ kind = "{kind}" }}`'
    if value is None:
        return "none"
    if value in ({}, []):
        return "empty"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`" if abs(value) < 1e15 else f"`{value}`"
    return f"`{json.dumps(value) if isinstance(value, str) else value}`"


class Undocumented(Exception):
    """Fields with neither a docstring nor a note; the message lists them."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole reference page, in Markdown."""
    out = [HEADER]
    missing: list[str] = []
    seen: set[tuple[str, type[BaseModel]]] = set()
    for section in sections():
        if (section.path, section.model) in seen:
            continue
        seen.add((section.path, section.model))
        title = f"`[{section.path}]`" if section.path else "Top level"
        if section.note:
            title += f" with `{section.note}`"
        out.append(f"\n## {title}\n")
        doc = inspect.getdoc(section.model)
        if doc and section.model is not Settings and doc != inspect.getdoc(BaseModel):
            out.append(_markdown(doc) + "\n")
        example = EXAMPLES.get(section.model)
        if example:
            out.append(f"Example: `{example}`.\n")
        out.append("| field | type | default | meaning |\n|---|---|---|---|")
        for name, field in section.model.model_fields.items():
            text = meaning(section.model, name, field)
            if text is None:
                missing.append(f"{section.model.__name__}.{name}")
                text = ""
            out.append(f"| `{name}` | {type_name(field.annotation)} | "
                       f"{_cell(default_text(field))} | {_cell(text)} |")
    if missing:
        raise Undocumented("settings fields without a docstring or a note in "
                           f"tidings.config.reference.NOTES: {', '.join(missing)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m tidings.config.reference [PATH]``: write the page (or print it)."""
    args = sys.argv[1:] if argv is None else argv
    page = render()
    if args:
        Path(args[0]).write_text(page)
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
