"""Streams from the server, stamped and counted: the HTTP client and what it records.

client      one streamed completion: request, SSE parsing, per-token timestamps, its record
http1       a small HTTP/1.1 client for streaming (bounded sizes and times)
rxstamp     receive timestamps of stream chunks
event_loop  uvloop when installed, else asyncio's own loop
records     RequestRecord: one request as measured
metrics     the server's Prometheus /metrics: parsing and sampling
"""
