"""Runs across hosts: targets resolved and preflighted, one worker per host, the summary;
over provisioning.flow (each worker runs one HostRun).

    targets       a host as a run needs it (HostTarget): resolved, profiled, preflighted
    workers       run ids, and the threads that run each host's flow
    summary       the summary table, verdicts against the card, the exit code
"""
