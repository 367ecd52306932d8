"""Where a run happened: environment.json, the GPUs, and this machine's child processes.

environment  the server's launch, the image, the host, bench itself (secrets redacted)
inventory    the GPUs, driver and CUDA versions (nvidia-smi)
telemetry    power, clocks, temperature and clock-limit reasons per window (nvidia-smi)
procs        stopping a child process (or its group) within a bound
command      `bench environment`
"""
