"""`bench local`: the whole flow on this machine against the twin (run, bundle, report,
verdict), what `make bench` does without a host.

command  `bench local [--speed N] [-- RUN_ARGS]`
"""
