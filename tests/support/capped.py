"""`python -m tests.support.capped GIB MODULE ARGS...`: run `python -m MODULE ARGS...` with its
address space capped at GIB GiB, so a process fed hostile input that starts to eat memory
fails its test (MemoryError, a non-zero exit), not the machine (issue 29). A wrapper
rather than a `preexec_fn`, which is unsafe in a test process that runs threads."""

from __future__ import annotations

import resource
import runpy
import sys

if __name__ == "__main__":
    gib, module, *rest = sys.argv[1:]
    limit = int(float(gib) * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
