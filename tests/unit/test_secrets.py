"""bench.secrets, the one door for a server's text: every form of every secret masked."""

from __future__ import annotations

import asyncio
import base64
import json
import string
import urllib.parse

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from bench.secrets import MASK, KnownSecrets, forms_of
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from bench.twin.faults import echoed
from tests.support.scripted import ScriptedClock

KEY = "sk-abc/+x=Z-1234567890"
HF = "hf_tokenCanary0987654321"
KEYS = st.text(string.ascii_letters + string.digits + "-_/+=.:~%", min_size=6, max_size=48)
AROUND = st.text(string.printable, max_size=12)


def _b64_inside(prefix: bytes, key: bytes, suffix: bytes, urlsafe: bool) -> tuple[str, int, int]:
    """base64 of prefix+key+suffix, and the span of characters whose 6 bits are all the key's."""
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    text = encode(prefix + key + suffix).decode()
    lo, hi = 8 * len(prefix), 8 * (len(prefix) + len(key))
    inside = [i for i in range(len(text)) if 6 * i >= lo and 6 * i + 6 <= hi]
    return text, inside[0], inside[-1] + 1


def test_every_encoding_of_the_key_is_masked() -> None:
    masks = KnownSecrets([KEY])
    shown = [
        KEY,
        json.dumps(KEY),
        json.dumps(KEY).replace("/", "\\/"),
        "".join(f"\\u{ord(c):04x}" for c in KEY),
        urllib.parse.quote(KEY, safe=""),
        urllib.parse.quote(KEY, safe="").replace("%2F", "%2f"),  # lower-case hex
        urllib.parse.quote_plus(KEY),
        base64.b64encode(KEY.encode()).decode(),
        base64.urlsafe_b64encode(KEY.encode()).decode(),
        "s\\u006b" + KEY[2:],  # one character escaped: hidden from a search of the bytes
        "sk%2D" + KEY[3:],
    ]
    for text in shown:
        masked = masks.mask(f"denied for Bearer {text}!")
        assert MASK in masked, text
        assert KEY not in masked and text not in masked, (text, masked)


@settings(max_examples=300, deadline=None)
@given(key=KEYS, before=AROUND, after=AROUND, lead=st.binary(max_size=5), urlsafe=st.booleans())
def test_base64_of_a_text_holding_the_key_keeps_none_of_the_keys_own_characters(
    key: str, before: str, after: str, lead: bytes, urlsafe: bool
) -> None:
    """At any byte alignment ("Basic user:key", "Bearer key" in a blob), no 6 of the base64
    characters decided by the key's bits alone survive together."""
    text, first, last = _b64_inside(lead, key.encode(), b"!", urlsafe)
    masked = KnownSecrets([key]).mask(before + text + after)
    assert MASK in masked
    for i in range(first, last - 5):
        window = text[i : i + 6]
        assert window not in masked or window in before + after, (text, masked)


@settings(max_examples=300, deadline=None)
@given(key=KEYS, before=AROUND, after=AROUND)
def test_verbatim_json_and_url_forms_never_survive(key: str, before: str, after: str) -> None:
    masks = KnownSecrets([key])
    for form in (key, json.dumps(key)[1:-1], urllib.parse.quote(key, safe="")):
        assert key not in masks.mask(before + form + after).replace(MASK, "\0")


def test_the_tree_of_a_json_answer_is_masked_keys_and_values_and_not_changed_in_place() -> None:
    masks = KnownSecrets.of(SecretStr(KEY), environ={"HF_TOKEN": HF})
    answer = {"error": {"message": f"denied for Bearer {KEY}", KEY: [1, 2.5, None, HF]}}
    masked = masks.mask_tree(answer)
    assert masked == {"error": {"message": f"denied for Bearer {MASK}", MASK: [1, 2.5, None, MASK]}}
    assert str(answer["error"]["message"]).endswith(KEY)  # the caller's object is left alone
    deep: list[object] = [KEY]
    for _ in range(5000):  # deeper than Python's recursion limit: walked without recursing
        deep = [deep]
    out = masks.mask_tree(deep)
    for _ in range(5000):
        out = out[0]
    assert out == [MASK]


def test_short_values_are_masked_verbatim_only_and_nothing_without_one() -> None:
    assert forms_of("abc") == frozenset()
    assert not KnownSecrets([None, ""])
    # A short key (a demo's `EMPTY`) is masked verbatim, as the key always was (also where
    # unescaping a text shows it); its base64, which ordinary text holds by chance, is not.
    short = KnownSecrets(["a/b+"])
    assert short.mask("denied for Bearer a/b+") == f"denied for Bearer {MASK}"
    assert short.mask("a%2Fb%2B and YS9iKw") == f"{MASK} and YS9iKw"
    assert KnownSecrets().mask(f"Bearer {KEY}") == f"Bearer {KEY}"
    assert KnownSecrets([KEY]) | KnownSecrets([HF]) and (
        KnownSecrets([KEY]) | KnownSecrets([HF])
    ).values == (HF, KEY)


def _client(handler: httpx.MockTransport, secrets: KnownSecrets | None = None) -> Client:
    return Client(
        "http://s", SecretStr(KEY), clock=ScriptedClock(), transport=handler, secrets=secrets
    )


def test_the_client_hands_on_no_secret_from_any_answer() -> None:
    """Bodies of the small calls (text and JSON), a stream's failure and its captured text."""

    def handler(request: httpx.Request) -> httpx.Response:
        said = request.headers["authorization"]
        b64 = base64.b64encode(said.encode()).decode()
        if request.url.path == "/metrics":
            return httpx.Response(200, text=f'# {said}\nvllm:x{{k="{b64}"}} 1\n')
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 3, "echo": said, "hf": HF})
        body = {"error": {"message": f"denied for {urllib.parse.quote(said)}"}}
        return httpx.Response(500, json=body)

    async def go() -> tuple[str, object, RequestRecord]:
        client = _client(httpx.MockTransport(handler), KnownSecrets([HF]))
        try:
            _, metrics = await client.get("/metrics")
            _, tokenized = await client.post_json("/tokenize", {"prompt": "x"})
            record = RequestRecord(worker=0, start_s=0.0)
            await client.stream("/v1/chat/completions", {"stream": True}, record)
            return metrics, tokenized, record
        finally:
            await client.aclose()

    metrics, tokenized, record = asyncio.run(go())
    everything = metrics + json.dumps(tokenized) + (record.error or "")
    assert record.error is not None and "Bearer" in record.error and MASK in record.error
    for secret in (KEY, HF, base64.b64encode(f"Bearer {KEY}".encode()).decode()[12:24]):
        assert secret not in everything, secret
    assert tokenized == {"count": 3, "echo": f"Bearer {MASK}", "hf": MASK}


def test_a_json_text_is_walked_only_when_it_could_hide_a_secret() -> None:
    masks = KnownSecrets([KEY])
    assert not masks.could_hide_in(b'{"tokens": [1, 2, 3], "count": 3}')
    assert not KnownSecrets().could_hide_in(KEY.encode())
    for raw in (
        KEY,
        "s\\u006b" + KEY[2:],
        "sk%2D" + KEY[3:],
        base64.b64encode(KEY.encode()).decode(),
    ):
        assert masks.could_hide_in(json.dumps({"m": raw}).encode()), raw


def test_what_the_twins_echo_fault_says_is_masked_whole() -> None:
    """bench twin serve --fault-echo-auth (the orchestrated secrets test's server) repeats the
    header verbatim, URL-encoded and in base64: the door leaves none of it."""
    said = echoed(f"Bearer {KEY}")
    assert KEY in said and base64.b64encode(f"Bearer {KEY}".encode()).decode() in said
    masked = KnownSecrets([KEY]).mask(said)
    assert masked.startswith(f"Bearer {MASK} (url Bearer%20{MASK}; basic ")
    assert KEY not in masked and urllib.parse.quote(KEY, safe="") not in masked
    assert base64.b64encode(f"Bearer {KEY}".encode()).decode()[12:-4] not in masked
