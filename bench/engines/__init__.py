"""What kind of server `bench run` measures, and what each kind tells about itself.

`detect` (bench.engines.detect) finds the engine from what the server really offers;
one module per engine (vllm, sglang, llamacpp, trtllm) reads that engine's facts: KV
capacity in tokens, running and waiting requests, speculative-decoding acceptance and
prefix-cache hits, normalised into the `vllm:*` keys the sweep already reads
(bench.stream.metrics), so the cell and its figures need not know the engine.
bench.engines.facts names where each fact came from (`ServerInfo.facts_source`);
docs/engines.md says where every fact comes from.
"""
