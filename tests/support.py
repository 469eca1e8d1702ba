"""Test support: the node harness and the SSE reader, re-exported for the test modules.

They live in tools/testing/, because tools (the crash test, the benches) run them too and a
tool must not import from the tests.
"""

from tools.testing.node_harness import HttpReply, Node, alive, http_call, wait_for
from tools.testing.sse_reader import SseEvent, SseReader

__all__ = ["HttpReply", "Node", "SseEvent", "SseReader", "alive", "http_call", "wait_for"]
