"""The orchestration side: runs on the user's workstation and drives a GPU host over SSH.

May use `bench`'s records and bundle code; `bench` never imports this package. Its folders,
lowest first (each imports only the ones before it; tests/unit/test_layering.py):

    hosts         reaching a host: ssh names, SSH commands and transfers, this machine
    containers    the host's Docker engine through the SDK (the only importer of docker)
    image         the image and the weights on the host; what CUDA the image needs
    preflight     what a launch needs from a host, and the checks
    flow          one host from nothing to a verified bundle
    runs          runs across hosts: targets, one worker per host, the summary
    slurm         the fleet as one Slurm job
    commands      each `provision` command, its parser beside its handler

and at the root:

    cli           the `provision` parser, built from the commands
    retry         the one retry loop (under every folder)
    __main__      `python -m provisioning`
"""
