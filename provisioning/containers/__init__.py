"""The host's Docker engine through the SDK; the only folder that imports `docker`. Over
provisioning.hosts (a host's name and SSH settings).

    engine        containers, images and execs on a host's engine (DockerEngine, ContainerSpec)
    engine_side   what the flow and the image steps need of an engine (EngineSide)
    docker_sdk    the SDK's connection to an engine, and its exceptions as ours
    local_images  images in this machine's own engine: build context, image chunks
"""
