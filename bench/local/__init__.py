"""`bench local`: the whole flow on this machine against the twin (run, bundle, report,
verdict), what `make bench` does without a host.

command         `bench local [--speed N] [--card CARD] [-- RUN_ARGS]`
publisher_card  a publisher's card on the twin: a twin fitted to it, its traffic, its verdict
"""
