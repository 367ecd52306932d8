"""A small hostile OpenAI-compatible server: one asyncio process on 127.0.0.1, told per
request how to misbehave by the first segment of the path.

    python -m tests.support.hostile_server [--log FILE] [--tls CERT KEY]   prints "PORT\n" once
                                                    it listens (https with --tls)

A client is pointed at http://127.0.0.1:PORT/h/<spec>, where <spec> is comma-separated
key=value pairs, e.g. `stream=neg-chunk` or `stream=ok,model=m2,version=0.2`:

    stream=   how POST /v1/chat/completions and /v1/completions answer (STREAMS; and
              `stale`: a good stream on a kept-alive connection, the next one on it closed)
    models=   how GET /v1/models answers: ok, nonlist, gzip-bomb, huge, redirect
    metrics=  how GET /metrics answers: none (404, the default), ok, gzip-bomb, huge
    model=, version=, max_model_len=, profile=   the server's identity
    speed=    a `speed` in /version, as JSON text (1e-6, 5e-324, 1e300)
    count=    what POST /tokenize's `count` is, as JSON text (5: the same for every text;
              1e300; many: the string "many"; null); tokenize=none: /tokenize answers 404
    prompt=   usage.prompt_tokens of every stream (100 unless given)
    echo=all  every answer repeats the request's `Authorization` header in every form a
              server might (verbatim, URL-encoded, base64, JSON \\u-escaped, one character
              escaped): in a header of every answer, the 500 bodies and SSE error events of
              alternate streams, the answers of the others and of whole (non-stream) prompts,
              /tokenize, /metrics, /v1/models and /version (issue 48; `echoed` below)
    script=ID every answer from the script a test posted to POST /__script/ID (the fuzzer:
              tests/hostile/test_fuzz.py): raw JSON bodies of /version, /v1/models, /tokenize
              counts, /metrics text, the content type of JSON answers, and the stream's usage
              values or an error status and body, each drawn by Hypothesis

Anything else (GET /version, POST /tokenize) answers like a well-behaved vLLM. Every
request is logged to --log as one JSON line (method, target, whether it had an
Authorization header), so a test can also play an HTTP proxy with it and see what came.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import itertools
import json
import ssl
import sys
import urllib.parse
from typing import Any

TOKEN_S = 0.01  # between two tokens of a well-behaved stream
ECHO_KEY_AT = 275  # where the key starts in an `echo=all` 500's body
STREAMS = (
    "ok", "neg-chunk", "hex-prefix", "no-crlf", "long-size-line", "huge-line", "usage-last",
    "lying-usage", "huge-usage", "html", "gzip", "early-close", "close-mid", "redirect",
    "stall", "stall-head", "malformed-json", "bad-status-line", "http-500", "over-max",
    "trickle", "huge-error", "trickle-error", "early-hints", "cr-only", "echo-auth",
)  # fmt: skip


def echoed(authorization: str) -> str:
    """What an `echo=all` answer says of the request's Authorization header."""
    key = authorization.removeprefix("Bearer ")
    every = "".join(f"\\u{ord(c):04x}" for c in key)
    one = key[:1] + "".join(f"\\u{ord(c):04x}" for c in key[1:2]) + key[2:]
    return (
        f"denied for {authorization} (url {urllib.parse.quote(authorization, safe='')}; "
        f"basic {base64.b64encode(authorization.encode()).decode()}; json {every}; "
        f"partly {one})"
    )


def _spec(target: str) -> tuple[dict[str, str], str]:
    """(/h/a=1,b=2/v1/models) -> ({"a": "1", "b": "2"}, "/v1/models")."""
    if not target.startswith("/h/"):
        return {}, target
    head, _, rest = target[3:].partition("/")
    spec = dict(p.partition("=")[::2] for p in head.split(",") if p)
    return spec, "/" + rest


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _event(text: str | None, n: int | None, prompt: int, finish: bool = False) -> bytes:
    delta = {} if text is None else {"content": text}
    obj: dict[str, Any] = {
        "id": "h", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": "length" if finish else None}],
    }  # fmt: skip
    if n is not None:
        obj["usage"] = {"prompt_tokens": prompt, "completion_tokens": n,
                        "total_tokens": prompt + n}  # fmt: skip
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Hostile:
    def __init__(self, log: str | None) -> None:
        self.log = log
        self.kept: set[asyncio.StreamWriter] = set()  # connections a `stale` stream kept open
        self.scripts: dict[str, dict[str, Any]] = {}  # id -> script (see the docstring)
        # 64 MiB of spaces in ~64 KB, made once (compressing it per request is slow)
        self.bomb = gzip.compress(b" " * (64 << 20), compresslevel=9)
        self.echo_count = itertools.count()  # alternates an `echo=all` server's answers

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (OSError, asyncio.IncompleteReadError, ValueError):  # OSError: TLS too
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        if self.log:
            with open(self.log, "a") as f:
                seen = {
                    "method": method,
                    "target": target,
                    "authorization": "authorization" in headers,
                }
                f.write(json.dumps(seen) + "\n")
        spec, path = _spec(target)
        if path.startswith("/__script/") and method == "POST":
            self.scripts[path.removeprefix("/__script/")] = json.loads(body)
            return await self._send(writer, 200, b"{}")
        if "script" in spec:
            return await self._scripted(writer, self.scripts[spec["script"]], method, path, body)
        if spec.get("echo") == "all":
            said = echoed(headers.get("authorization", ""))
            return await self._echo(writer, method, path, said, json.loads(body or b"{}"))
        if target.startswith("http://"):  # a proxy request: refuse it, it is only logged
            await self._send(writer, 502, b"not a proxy")
            return False
        if path == "/v1/models":
            return await self._models(writer, spec)
        if path == "/version":
            version: dict[str, Any] = {"version": spec.get("version", "0.1-hostile")}
            if "profile" in spec:
                version["twin"] = {"profile": spec["profile"]}
            if "speed" in spec:
                version["speed"] = json.loads(spec["speed"])
            return await self._send(writer, 200, json.dumps(version).encode())
        if path == "/metrics":
            return await self._metrics(writer, spec.get("metrics", "none"))
        if path == "/tokenize" and method == "POST" and spec.get("tokenize") != "none":
            req = json.loads(body or b"{}")
            text = req.get("prompt") or " ".join(
                str(m.get("content", "")) for m in req.get("messages", [])
            )
            count: Any = len(text.split()) + 3
            if "count" in spec:
                count = "many" if spec["count"] == "many" else json.loads(spec["count"])
            return await self._send(writer, 200, json.dumps({"count": count}).encode())
        if path in ("/v1/chat/completions", "/v1/completions") and spec.get("stream") == "stale":
            # llama.cpp's server: a whole stream that says keep-alive, then the connection is
            # gone. Here the next request on it is read and never answered: it is closed.
            if writer in self.kept:
                self.kept.discard(writer)
                return False
            self.kept.add(writer)
            await self._stream(writer, "stale", json.loads(body or b"{}"))
            return True
        if path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            req = json.loads(body or b"{}")
            req["_authorization"] = headers.get("authorization", "")
            await self._stream(writer, spec.get("stream", "ok"), req, int(spec.get("prompt", 100)))
            return False  # every stream ends its connection: simpler, and allowed
        return await self._send(writer, 404, b'{"error": "not found"}')

    async def _scripted(
        self,
        writer: asyncio.StreamWriter,
        script: dict[str, Any],
        method: str,
        path: str,
        payload: bytes,
    ) -> bool:
        """Answer as the script says; a stream is a paced one with the script's usage
        values (raw JSON text), or its error status and body."""
        ctype = script.get("ctype", "application/json")
        raw = {"/version": "version", "/v1/models": "models"}
        if path in raw and method == "GET":
            return await self._send(writer, 200, script[raw[path]].encode(), ctype=ctype)
        if path == "/tokenize" and method == "POST":
            count = script["count"]
            if count == "words":  # counts the text, as a tokenizer does
                req = json.loads(payload or b"{}")
                text = req.get("prompt") or " ".join(
                    str(m.get("content", "")) for m in req.get("messages", [])
                )
                count = str(len(text.split()) + 3)
            body = b'{"count": ' + count.encode() + b"}"
            return await self._send(writer, 200, body, ctype=ctype)
        if path == "/metrics":
            return await self._send(writer, 200, script["metrics"].encode(), ctype="text/plain")
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return await self._send(writer, 404, b"")
        if script.get("status", 200) != 200:
            body = script.get("error_body", "").encode()
            writer.write(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%b"
                         % (script["status"], len(body), body))  # fmt: skip
            await writer.drain()
            return False
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\ntransfer-encoding: chunked\r\n\r\n")  # fmt: skip
        for n, usage in enumerate(script["usage"]):
            event = (
                b'data: {"choices": [{"index": 0, "delta": {"content": "tok"}}], "usage": '
                b'{"prompt_tokens": '
                + script["prompt"].encode()
                + b', "completion_tokens": '
                + usage.encode()
                + b"}}\n\n"
            )
            writer.write(_chunk(event))
            await writer.drain()
            await asyncio.sleep(TOKEN_S if n else 0)
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return False

    async def _echo(
        self, writer: asyncio.StreamWriter, method: str, path: str, said: str, req: Any
    ) -> bool:
        """An answer that repeats the key (`echo=all`); the JSON escapes in `said` are meant
        literally, so it goes into JSON bodies unescaped where it holds them."""
        header = f"x-echo: {said.encode('ascii', 'replace').decode()}\r\n"
        quoted = json.dumps(said).replace("\\\\u", "\\u")  # keep the \\u escapes as escapes
        if path == "/metrics":
            text = (f"# HELP echo {said}\nvllm:num_requests_running 0\n"
                    "vllm:num_requests_waiting 0\n"
                    f"vllm:echo_info{{said={quoted}}} 1\n")  # fmt: skip
            return await self._send(writer, 200, text.encode(), header, ctype="text/plain")
        if path == "/v1/models":
            body = ('{"object": "list", "data": [{"id": "hostile-model", "object": "model", '
                    f'"max_model_len": 4096, "owned_by": {quoted}}}]}}')  # fmt: skip
            return await self._send(writer, 200, body.encode(), header)
        if path == "/version":
            return await self._send(writer, 200, f'{{"version": {quoted}}}'.encode(), header)
        if path == "/tokenize" and method == "POST":
            text = req.get("prompt") or " ".join(
                str(m.get("content", "")) for m in req.get("messages", [])
            )
            count = len(str(text).split()) + 3
            answer = f'{{"count": {count}, "echo": {quoted}}}'
            return await self._send(writer, 200, answer.encode(), header)
        if path not in ("/v1/chat/completions", "/v1/completions") or method != "POST":
            return await self._send(writer, 404, f'{{"error": {quoted}}}'.encode(), header)
        error = f'{{"error": {{"message": {quoted}, "type": "auth"}}}}'.encode()
        if next(self.echo_count) % 2 == 0:
            # A stream's is padded so that the key starts 25 bytes before the 300 a client
            # reads of an error body for its message (bench.stream.response.MAX_ERROR_BODY):
            # the excerpt ends inside the key. A whole answer's is read whole.
            start = '{"error": {"message": "'
            streamed = isinstance(req, dict) and req.get("stream")
            pad = "." * (ECHO_KEY_AT - len(start) - len("denied for Bearer ")) if streamed else ""
            failed = f'{start}{pad}{quoted[1:]}, "type": "auth"}}}}'.encode()
            writer.write(b"HTTP/1.1 500 X\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\nconnection: close\r\n%b\r\n%b"
                         % (len(failed), header.encode(), failed))  # fmt: skip
            await writer.drain()
            return False
        # The other half answer 200: a stream's one token then an error event; a whole
        # answer (the fingerprint's) whose text is the echo.
        content = json.dumps({"content": said}).replace("\\\\u", "\\u")
        if not (isinstance(req, dict) and req.get("stream")):
            whole = ('{"choices": [{"index": 0, "finish_reason": "length", "message": '
                     '{"role": "assistant", ' + content[1:] + '}], '
                     '"usage": {"prompt_tokens": 100, "completion_tokens": 9}}')  # fmt: skip
            return await self._send(writer, 200, whole.encode(), header)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
                     b"transfer-encoding: chunked\r\n%b\r\n" % header.encode())  # fmt: skip
        writer.write(
            _chunk(
                b'data: {"choices": [{"index": 0, "delta": '
                + content.encode()
                + b'}], "usage": {"prompt_tokens": 100, "completion_tokens": 1}}\n\n'
            )
        )
        writer.write(_chunk(b"data: " + error + b"\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return False

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, extra: str = "",
        ctype: str = "application/json",
    ) -> bool:  # fmt: skip
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            f"{extra}\r\n".encode()
            + body
        )
        await writer.drain()
        return True

    async def _models(self, writer: asyncio.StreamWriter, spec: dict[str, str]) -> bool:
        how = spec.get("models", "ok")
        model = {"id": spec.get("model", "hostile-model"), "object": "model",
                 "max_model_len": int(spec.get("max_model_len", "4096"))}  # fmt: skip
        if how == "nonlist":
            return await self._send(writer, 200, b'{"object": "list", "data": "hostile-model"}')
        if how == "gzip-bomb":
            return await self._bomb(writer)
        if how == "huge":
            return await self._huge(writer)
        if how == "redirect":
            return await self._send(writer, 307, b"", "location: http://127.0.0.1:9/\r\n")
        return await self._send(
            writer, 200, json.dumps({"object": "list", "data": [model]}).encode()
        )

    async def _metrics(self, writer: asyncio.StreamWriter, how: str) -> bool:
        if how == "ok":
            text = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            return await self._send(writer, 200, text, ctype="text/plain")
        if how == "gzip-bomb":
            return await self._bomb(writer)
        if how == "huge":
            return await self._huge(writer)
        return await self._send(writer, 404, b"")

    async def _bomb(self, writer: asyncio.StreamWriter) -> bool:
        return await self._send(writer, 200, self.bomb, "content-encoding: gzip\r\n")

    async def _huge(self, writer: asyncio.StreamWriter) -> bool:
        size = 64 << 20
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % size)  # fmt: skip
        piece = b" " * (1 << 20)
        for _ in range(size >> 20):
            writer.write(piece)
            await writer.drain()
        return True

    async def _stream(
        self, writer: asyncio.StreamWriter, how: str, req: dict[str, Any], prompt: int = 100
    ) -> None:
        max_tokens = int(req.get("max_tokens", 16))
        ok_head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                   b"connection: close\r\ntransfer-encoding: chunked\r\n\r\n")  # fmt: skip
        w = writer.write
        if how == "stall-head":
            await asyncio.sleep(3600)
        if how == "bad-status-line":
            w(b"HTTP/1.1 OK-ish\r\n\r\n")
        elif how == "redirect":
            # Closes the connection after, without saying so (no `connection: close`).
            w(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:9/v1\r\n"
              b"content-length: 0\r\n\r\n")  # fmt: skip
        elif how == "huge-error":  # a 64 MiB error body: only its start may be read
            w(b"HTTP/1.1 500 X\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n"
              % (64 << 20))  # fmt: skip
            for _ in range(64):
                w(b"E" * (1 << 20))
                await writer.drain()
        elif how == "trickle-error":  # an error body one byte at a time, forever
            w(b"HTTP/1.1 500 X\r\ncontent-type: text/plain\r\ncontent-length: 1000000\r\n\r\n")
            for _ in range(36_000):
                w(b"e")
                await writer.drain()
                await asyncio.sleep(0.1)
        elif how == "http-500":
            body = b'{"error": {"message": "hostile failure"}}'
            w(b"HTTP/1.1 500 X\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
        elif how == "html":
            body = b"<html>not an event stream</html>"
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n%b"
              % (len(body), body))  # fmt: skip
        elif how == "gzip":
            body = gzip.compress(_event("a", 1, prompt) + b"data: [DONE]\n\n")
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
              b"content-length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
        elif how == "early-hints":  # RFC 9110 §15.2: a 1xx before the answer
            w(b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n")
            await writer.drain()
            w(ok_head)
            await self._body(writer, "ok", max_tokens, prompt)
        elif how == "echo-auth":  # a 500 that quotes the request's Authorization header
            body = f"bad request, Authorization: {req.get('_authorization', '')}".encode()
            w(b"HTTP/1.1 500 X\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
        elif how == "stale":  # a good stream that keeps its connection (no `connection: close`)
            w(ok_head.replace(b"connection: close\r\n", b""))
            await self._body(writer, "ok", max_tokens, prompt)
        else:
            w(ok_head)
            await self._body(writer, how, max_tokens, prompt)
        await writer.drain()

    async def _body(
        self, writer: asyncio.StreamWriter, how: str, max_tokens: int, prompt: int
    ) -> None:
        w = writer.write
        if how == "neg-chunk":
            w(b"-6\r\n" + b"data: x\n\n" * 100)
        elif how == "hex-prefix":
            w(b"0x10\r\ndata: {}\n\n\r\n")
        elif how == "no-crlf":
            event = _event("a", 1, prompt)
            w(b"%x\r\n%bXY" % (len(event), event) + _chunk(_event("b", 2, prompt)))
        elif how == "long-size-line":
            w(b"1" + b";" * (64 << 10))
        elif how == "huge-line":
            w(_chunk(b"data: {" + b"x" * (4 << 20)))
        elif how == "early-close":
            pass
        elif how == "stall":
            w(_chunk(_event(None, 0, prompt)))
            await writer.drain()
            await asyncio.sleep(3600)
        elif how == "trickle":  # keep-alive comments forever, never a token
            w(_chunk(_event(None, 0, prompt)))
            for _ in range(36_000):
                w(_chunk(b": keep-alive\n\n"))
                await writer.drain()
                await asyncio.sleep(0.1)
        elif how == "malformed-json":
            w(_chunk(b"data: {oops\n\n"))
        else:  # ok, usage-last, lying-usage, huge-usage, close-mid, over-max: a paced stream
            first = _event(None, 0, prompt)
            w(_chunk(first.replace(b"\n", b"\r") if how == "cr-only" else first))
            for n in range(1, max_tokens + 1):
                await asyncio.sleep(TOKEN_S)
                usage: int | None = n
                if how == "usage-last":
                    usage = max_tokens if n == max_tokens else None
                elif how == "lying-usage" and n == 1:
                    usage = 2**63
                elif how == "over-max":
                    usage = 3 * n
                event = _event("tok", usage, prompt)
                if how == "cr-only":  # the SSE spec allows CR alone as a line end
                    event = event.replace(b"\n", b"\r")
                if how == "huge-usage" and n == 1:
                    event = event.replace(
                        b'"completion_tokens": 1', b'"completion_tokens": ' + b"9" * 5000
                    )
                w(_chunk(event))
                await writer.drain()
                if how == "close-mid" and n == 1:
                    return
            done = b"data: [DONE]\r\r" if how == "cr-only" else b"data: [DONE]\n\n"
            w(_chunk(done) + b"0\r\n\r\n")
        await writer.drain()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", default=None)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), default=None)
    args = parser.parse_args(argv)
    hostile = Hostile(args.log)
    tls = None
    if args.tls:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(*args.tls)
    server = await asyncio.start_server(hostile.handle, "127.0.0.1", 0, limit=1 << 20, ssl=tls)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
