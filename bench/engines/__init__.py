"""What kind of server `bench run` measures, and what each kind tells about itself.

base        the shape of one engine's facts (`EngineKind`) and a bounded Prometheus text reader
detect      which engine serves, read from what the server offers, never from a flag
facts       what each engine exposes, as `ServerInfo.facts_source` values
vllm        vLLM: its `vllm:*` families are the canonical keys already
sglang      SGLang: `sglang:*` metrics, server and model info
llamacpp    llama.cpp's `llama-server`: `llamacpp:*` metrics, `/props`, `/tokenize`
trtllm      TensorRT-LLM's `trtllm-serve`: JSON iteration statistics
tokenizers  an engine's text tokenizer, to count streamed tokens without usage

`detect` (bench.engines.detect) finds the engine from what the server really offers;
one module per engine (vllm, sglang, llamacpp, trtllm) reads that engine's facts: KV
capacity in tokens, running and waiting requests, speculative-decoding acceptance and
prefix-cache hits, normalised into the `vllm:*` keys the sweep already reads
(bench.stream.metrics), so the cell and its figures need not know the engine.
bench.engines.facts names where each fact came from (`ServerInfo.facts_source`);
docs/engines.md says where every fact comes from.
"""
