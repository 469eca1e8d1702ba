"""Test support: the node harness, re-exported for the test modules.

The harness itself lives in tools/testing/node_harness.py, because tools/crashtest runs it
too and a tool must not import from the tests.
"""

from tools.testing.node_harness import HttpReply, Node, alive, http_call, wait_for

__all__ = ["HttpReply", "Node", "alive", "http_call", "wait_for"]
