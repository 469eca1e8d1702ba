"""Tools of the checkout (crash test, testing scaffolding, fsck, tidy, benchmarks); not shipped.

A regular package, not a namespace one, so `python -m tools.crashtest` and the tests' imports
of `tools.testing` resolve to this checkout even if some other `tools` is on sys.path later.
"""
