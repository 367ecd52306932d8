"""What a launch needs from a host, and the checks, one line each; over
provisioning.image (the CUDA the image needs, the weights in the cache).

    checks        preflight of a host: every check in order, each with what to do on failure
    gpu           GPU count and model, memory per GPU, driver and its CUDA ceiling
    storage       free disk for the downloads, and weights already in the cache
    memory        the host's RAM (MemTotal) against what the launch needs
    report        one Check per line (name, status, found, what to do) and the table
    requirements  a launch's needs as data (host_requirements.toml beside it)
"""
