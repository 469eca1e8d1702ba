"""The console's static files (`GET /console`, docs/OPERATIONS.md 16): a page and its
script, shipped in the package's console/ folder, read once and served as they are. No
build step, nothing fetched from elsewhere: the page talks only to the API of the node
that served it, with the key the user types, kept in the tab (sessionStorage)."""

from __future__ import annotations

import functools
import os

from topics_actors.gateway.http_message import HttpResponse

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "console")
# path -> (file in FOLDER, content type)
FILES = {"/console": ("index.html", "text/html; charset=utf-8"),
         "/console/": ("index.html", "text/html; charset=utf-8"),
         "/console/console.js": ("console.js", "text/javascript; charset=utf-8")}
# The page may load only its own script and call only its own origin's API; no framing.
HEADERS = (("content-security-policy", "default-src 'none'; script-src 'self'; "
            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
           ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer"),
           ("cache-control", "no-cache"))


@functools.cache
def _read(name: str) -> bytes:
    with open(os.path.join(FOLDER, name), "rb") as handle:
        return handle.read()


def response(path: str) -> HttpResponse:
    """The file for `path` (one of FILES: the route table sends no other here)."""
    name, content_type = FILES[path]
    return HttpResponse(200, _read(name), content_type, HEADERS)
