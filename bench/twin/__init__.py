"""The twin: a simulated vLLM server (engine model, HTTP surface, profiles, calibration).

engine     the engine core: a continuous-batching scheduler as a discrete-event model
kvcache    the KV block pool with prefix caching by block hash
frontend   the API-server side of a request before the engine sees it
profile    performance profiles: data files, validated, with the cost functions
noise      run-to-run noise: a seeded log-normal factor on every step cost of a cell
flavors    what SGLang or llama.cpp would answer where vLLM does
tokenizer  a deterministic stand-in tokenizer
requests   validation of request bodies: bad input is a 400, never a 500
streams    one response rendered: SSE chunks or JSON
answers    what it answers: words from its seed and the prompt (and --dtype)
paths      its reasoning field and tool calls, as the launch's parser flags shape them
metrics    /metrics in Prometheus text format, the flavor's families
http       a small HTTP/1.1 server on asyncio
server     routes, API-key check, the real-time loop driving the engine
faults     fault injection for reliability tests, with seeded dice
process    the twin as a child process on 127.0.0.1, its port read back
tracing    --otlp-traces-endpoint: a vLLM-like trace span per completed request (owns
           opentelemetry, imported only with the flag)
virtual    the published methodology against the engine in virtual time
openloop   open-loop arrivals (or capped: a closed loop) through the engine in virtual time
capacity   the true SLO capacity (p99 bounds, Poisson rate) by bisection in virtual time
card_fit   a profile fitted to a publisher's card: serves its traffic at its figures
command    `bench twin serve`, `bench twin fit`
"""
