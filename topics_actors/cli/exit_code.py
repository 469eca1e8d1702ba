"""The `topics` command's exit codes (docs/OPERATIONS.md, "The topics command"): a closed
set, so that scripts can tell a missing topic from a server that is down."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    API_ERROR = 1       # the server answered an error (4xx other than below, 5xx)
    USAGE = 2           # bad arguments or bad input (JSON that does not parse): nothing sent
    UNREACHABLE = 3     # no answer from the server: refused, timed out, not HTTP
    NOT_FOUND = 4       # 404: no such topic, router or route (a single node's /v0/cluster)
    FORBIDDEN = 5       # 401 or 403: the key is missing, unknown or lacks the scope
    DIFFER = 6          # `checksum`: a topic's in-sync copies do not agree (or did not answer)
    TIMED_OUT = 7       # `cluster move|drain`: the moves were not done within --timeout
    INTERRUPTED = 130   # Ctrl-C before the verb finished (`tail -f` ends this way on purpose)
