"""Entry point of a gateway process: `python -m topics_actors.gateway --options <JSON>`
(spawned by the supervisor, which passes the listening socket's descriptor;
config.GatewayOptions). Its settings, API keys included, come from the environment."""

from __future__ import annotations

import sys

import zmq

from topics_actors.child_process import child_main
from topics_actors.config import GatewayOptions
from topics_actors.gateway.gateway_server import GatewayServer
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.supervisor_link import SupervisorLink


def serve(options: GatewayOptions, _ctx: zmq.Context, link: SupervisorLink | None) -> None:
    settings = GatewaySettings.from_env()
    if link:
        link.hello("", "")
    GatewayServer(settings, options, link).serve()


def main(argv: list[str] | None = None) -> int:
    return child_main(GatewayOptions, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
