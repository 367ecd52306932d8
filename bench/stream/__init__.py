"""Streams from the server, stamped and counted: the HTTP client and what it records.

client      one streamed completion: request, per-token timestamps, its record; small calls
sse         the stream's SSE lines -> the record (usage counts, text, [DONE], error events)
http1       a small HTTP/1.1 client for streaming (bounded sizes and times)
response    one HTTP/1.1 response as http1 parses it (head, chunked framing, error body)
bodies      httpx bodies and heads read within bounds (small calls, error bodies)
urls        the server's base URL: checked, and whether it is on this machine
tokens      output tokens counted when the server sends no usage on every chunk
rxstamp     receive timestamps of stream chunks
event_loop  uvloop when installed, else asyncio's own loop
waker       a sub-millisecond wake-up on the loop (a Linux timerfd): the open loop's due times
records     RequestRecord: one request as measured
traceparent  the W3C traceparent every request carries, a new random trace id each
metrics     the server's Prometheus /metrics: parsing and sampling
"""
