"""The `provision` commands, each its parser beside its handler (provisioning.cli lists
them); and compose.yaml. The top folder: nothing in provisioning imports it but the cli.

    options       the arguments several commands share, turned into a TargetChoice once
    preflight     `provision preflight`
    bench         `provision bench` (over SSH, or --slurm / --cluster)
    publisher_card  a publisher's card as the run's traffic and launch profile (`CARD=`)
    clean         `provision clean`: the containers a crashed run left
    slurm         `bench --slurm`'s options, `provision node-run` and `attach`
    compare       `provision compare` and `compare-commits`: two images, then B against A
    bisect        `provision bisect`: the first vLLM commit that moved one figure
    compose_file  compose.yaml rendered from the launch profiles (`make compose`)
"""
