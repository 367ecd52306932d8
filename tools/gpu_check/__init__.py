"""The GPU check for a GPU machine nobody has run on yet (`make gpu-check`).

__main__  `python -m tools.gpu_check --out FILE [--url URL]`: every part, one JSON file
parts     the parts (python, inventory, telemetry, self-test, smoke), each bounded in time
load      `python -m tools.gpu_check.load SECONDS`: matmuls on every GPU, as its own process
"""
