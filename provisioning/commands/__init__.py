"""The `provision` commands, each its parser beside its handler (provisioning.cli lists
them); and compose.yaml. The top folder: nothing in provisioning imports it but the cli.

    bench         `provision preflight`, `bench` and `clean`
    compare       `provision compare` and `compare-commits`: two images, then B against A
    bisect        `provision bisect`: the first vLLM commit that moved one figure
    compose_file  compose.yaml rendered from the launch profiles (`make compose`)
"""
