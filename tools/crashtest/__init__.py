"""tools/crashtest: a randomized kill-and-verify loop over a real node (see __main__)."""
