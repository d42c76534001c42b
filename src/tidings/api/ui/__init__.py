"""The dashboard under ``/ui``, for on-call engineers and support agents.

Pages are rendered on the server (Jinja2, ``api/templates/``). Each page has live
sections that ``static/app.js`` refreshes in place every few seconds by fetching the
same sections from ``/ui/live/…`` (HTML, no frame): no build step, nothing from a
CDN, and every page still works with scripts off (minus the refresh).

A browser logs in once with an API token (``viewer`` to look, ``operator`` to act);
the session cookie holds the token id and an expiry only (``auth.Sessions``), and the
token is re-checked on every request. Forms that change something carry the
session's CSRF token and answer with a redirect (post/redirect/get). The timeline
search is a form too, posted with the CSRF token and answered in place (its live
refresh posts it again), so what was typed never goes into a URL.

Nothing here computes a number of its own: status, timelines, dead letters and redrive
come from ``tidings.operate.operations`` as the read model's types
(``tidings.operate.readmodel``), as
for the JSON API and the CLI. A recipient is shown by its surrogate, never by address.

- ``routes``: the routes, and ``install`` (the app's dashboard state and error pages);
- ``views``: what each template shows, built from the read model;
- ``formatting``: numbers, durations, rates and times as the pages write them;
- ``pages``: templates, static files and the security headers;
- ``suppressions``: the suppression list (find, add, remove, export);
- ``session``: login, forms and CSRF;
- ``history``: the overview's sparklines.
"""

from tidings.api.ui.routes import install, router

__all__ = ["install", "router"]
