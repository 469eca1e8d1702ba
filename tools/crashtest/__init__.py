"""tools/crashtest: a randomized kill-and-verify loop over a real node (see __main__); its
load, oracle and kill table live in tools/testing, shared with tests/fault/test_kill_matrix.py."""
