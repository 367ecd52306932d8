"""One host from nothing to a verified bundle: the conductor over typed seams, and its
steps; over provisioning.preflight, image, containers and hosts.

    host_run       the conductor (HostRun): preflighted host to signed, verified bundle
    seams          what the steps share: Shell, Placement, Steps, Workspace, ServerContainer
    options        what one host run is asked (Options, Secrets) and gives back (HostOutcome)
    over_ssh       a host reached over SSH, as the conductor places a run on it
    server_start   the GPU self-test, the weights, the server container
    readiness      waiting for the server to serve (health, crash, deadline)
    sweep_exec     `bench run` inside the server container, its output streamed here
    workload       `--workload NAME|FILE`: checked here, a file staged on the host for it
    live           `--otel-url`, `--metrics-port`: checked here, the port published on the host
    server_traces  `--server-traces` or the profile's: the server's spans to the run's receiver
    sealing        what the flow learnt written into the run, then sign and pack on the host
    pull_back      the signed bundle copied back, opened and verified here
    reconnect      both connections reopened after a drop, the sweep going on
    signing        the host's bundle-signing key, made on the host and never leaving it
    recipe         how the image was made and the run started, for the bundle's recipe
"""
