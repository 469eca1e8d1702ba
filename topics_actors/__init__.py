"""topics-actors: a persistent event engine built as a multiprocess actor system."""

__version__ = "0.1.0"
