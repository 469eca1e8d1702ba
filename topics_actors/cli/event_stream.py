"""Server-sent events read from a byte stream (a watch or work stream): `events()` yields
(event, id, data) per frame and skips comments (heartbeats). Pure over any object with
`readline()`, so it is tested without a socket."""

from __future__ import annotations

from collections.abc import Iterator


def events(stream) -> Iterator[tuple[str, str | None, str]]:
    """Frames until the stream ends; a frame without `event:` is a `message`."""
    event, event_id, data = "message", None, []
    while True:
        raw = stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, event_id, "\n".join(data)
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
