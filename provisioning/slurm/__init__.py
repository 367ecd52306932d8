"""The fleet as one Slurm job: one task per exclusive node, one bundle each; over
provisioning.runs (each node runs one worker, the submitter the summary).

    submit        `provision bench --slurm`: the job written, submitted and followed
    node          one node's part of the job (`provision node-run`), the flow on the node
    watch         the submitted job watched until it ends, then the bundles collected
    jobs          sbatch, squeue, scontrol, sacct and scancel, through their own commands
    shared_dir    the job's run directory on the shared filesystem, here or over SFTP
"""
