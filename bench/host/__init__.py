"""Where a run happened: environment.json and the GPUs.

environment  the server's launch, the image, the host, bench itself (secrets redacted)
inventory    the GPUs, driver and CUDA versions (nvidia-smi)
telemetry    power, clocks, temperature and clock-limit reasons per window (nvidia-smi)
command      `bench environment`
"""
