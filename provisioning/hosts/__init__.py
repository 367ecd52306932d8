"""Reaching a host: names as `ssh -G` resolves them, SSH commands and file transfer, host
keys, or this machine itself. The bottom folder: it imports no other provisioning folder.

    inventory     GPU hosts: names resolved the way ssh resolves them, plus hosts.toml
    remote        commands and file transfers over one verified SSH connection
    transfer      SFTP copies to and from a host, resumed after dropped connections
    local         this machine, as the host flow sees a host (a Slurm node's own part)
    host_keys     the host's SSH key, checked against the known_hosts files ssh names
    ssh_channels  what travels over an open connection's channels besides commands and SFTP
    shell         what driving a host needs of it, however it is reached (Shell, Probe)
"""
