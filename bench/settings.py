"""Settings from the environment (`BENCH_*`, nested with `__`), built once in the CLI.

Each subsystem owns a nested model here; the resolved settings go into every bundle
with secrets shown as ********.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bench.errors import SettingsError, first_problem
from bench.logs import LogFormat
from bench.secrets import KnownSecrets


class HistorySettings(BaseModel):
    """Where `bench history` keeps its database (BENCH_HISTORY__URL): a postgresql:// URL
    without a password (libpq reads PGPASSWORD or ~/.pgpass), or a SQLite file; None: the
    default file (bench.history.database)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = None

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        if value:
            problem = history_url_problem(value)
            if problem:
                raise ValueError(problem)
        return value


# libpq's URI parameters that carry a secret (postgresql://h/db?password=...)
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


def _query_without_password(query: str) -> tuple[str, bool]:
    """The query with the values of _SECRET_PARAMETERS as ********; whether it had one."""
    words = query.split("&")
    secret = [
        i for i, word in enumerate(words)
        if "=" in word and unquote(word.partition("=")[0]).strip().lower() in _SECRET_PARAMETERS
    ]  # fmt: skip
    for i in secret:
        words[i] = words[i].partition("=")[0] + "=********"
    return "&".join(words), bool(secret)


def without_password(url: str) -> str:
    """`url` with its password, if any (in the user part or as a password= parameter), as
    ********."""
    try:
        parts = urlsplit(url)
        query, in_query = _query_without_password(parts.query)
        if parts.password is None and not in_query:
            return url
        netloc = parts.netloc
        if parts.password is not None:
            user = f"{parts.username}:********@" if parts.username else ":********@"
            port = f":{parts.port}" if parts.port else ""
            netloc = f"{user}{parts.hostname or ''}{port}"
    except ValueError:  # a port that is not a number, a bracket that does not close
        return url.partition("://")[0] + "://..."
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def history_url_problem(url: str) -> str | None:
    """Why a history database URL is refused: a password in it (it would be seen on the
    command line, in `ps` and in logs). Never quotes the password."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return f"history database {url.partition('://')[0]}://...: not a URL"
    if password is not None or _query_without_password(parts.query)[1]:
        return (
            f"history database {without_password(url)}: a password in the URL is refused "
            "(give it in PGPASSWORD or ~/.pgpass)"
        )
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BENCH_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    log_format: LogFormat = "auto"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    # The API key of the server under test. Only from the environment (BENCH_API_KEY,
    # or VLLM_API_KEY as vLLM itself reads it); never a command-line flag. It goes to that
    # server only: `--tokenizer-url` gets BENCH_TOKENIZER_API_KEY, or no key.
    api_key: SecretStr | None = None
    tokenizer_api_key: SecretStr | None = None
    # A PEM file of the CA (or the self-signed certificate) an https:// server under test
    # is checked against instead of the system's (BENCH_CA_FILE).
    ca_file: str | None = None
    history: HistorySettings = HistorySettings()

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", "tokenizer_api_key", mode="before")
    @classmethod
    def _key_is_a_header_value(cls, value: object) -> object:
        # The one check of a key (issue 29, S1/H6): it travels as an HTTP header, so a CR,
        # LF, other control character or non-ASCII letter would fail (or split the header)
        # far below, in a message quoting it. The message here never shows the key.
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(raw, str):
            key_problem(raw)
        return value

    @field_validator("ca_file")
    @classmethod
    def _ca_file_reads(cls, value: str | None) -> str | None:
        if value is not None:
            ca_problem(value)
        return value

    def known_secrets(self, environ: Mapping[str, str]) -> KnownSecrets:
        """Every secret the run knows (the server's key, the tokenizer's, the Hugging Face
        token from ENVIRON), for bench.secrets to mask in what a server says."""
        return KnownSecrets.of(self.api_key, self.tokenizer_api_key, environ=environ)

    def redacted(self) -> dict[str, Any]:
        """The resolved settings as recorded in bundles: secrets as ********."""
        out = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is not None and "SecretStr" in str(field.annotation):
                out[name] = "********" if getattr(self, name) is not None else None
        return out


def key_problem(key: str) -> None:
    """Raise ValueError (saying what, never the key) unless `key` is printable ASCII."""
    if not key:
        raise ValueError("the key is empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise ValueError("the key contains a control character (a CR or LF from a file?)")
    if not key.isascii():
        raise ValueError("the key contains a character that is not ASCII")
    if key != key.strip():
        raise ValueError("the key starts or ends with a space")


def ca_problem(path: str) -> None:
    """Raise ValueError unless `path` is a readable file of PEM certificates."""
    if not Path(path).is_file():
        raise ValueError(f"{path!r} is not a file")
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ValueError(f"{path!r} holds no PEM certificate ({type(exc).__name__})") from None


def _nested(env: dict[str, str]) -> dict[str, Any]:
    """BENCH_A__B=v -> {"a": {"b": "v"}}; every BENCH_* variable is kept so unknown ones fail."""
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("BENCH_"):
            continue
        path = key[len("BENCH_") :].lower().split("__")
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # BENCH_A=x and BENCH_A__B=y: A is not nested
                raise SettingsError(
                    f"setting {key} is invalid: BENCH_{part.upper()} is not a nested setting",
                    hint=f"unset {key} in the environment",
                )
            node = child
        if isinstance(node.get(path[-1]), dict):
            raise SettingsError(
                f"setting {key} is invalid: BENCH_{path[-1].upper()} is not a nested setting",
                hint=f"unset the BENCH_{path[-1].upper()}__* variables in the environment",
            )
        node[path[-1]] = value
    return out


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """Build settings from the environment; a malformed value is a one-line SettingsError.

    Validation goes through our own mapping of BENCH_* so that an unknown variable
    (a typo) is refused instead of silently ignored.
    """
    env = dict(os.environ if environ is None else environ)
    try:
        settings = Settings.model_validate(_nested(env))
    except ValidationError as exc:
        field, what = first_problem(exc)
        where = "BENCH_" + field.replace(".", "__").upper()
        raise SettingsError(
            f"setting {where} is invalid: {what}",
            hint=f"fix or unset {where} in the environment",
        ) from None
    if settings.api_key is None and env.get("VLLM_API_KEY"):
        try:
            key_problem(env["VLLM_API_KEY"])
        except ValueError as exc:
            raise SettingsError(
                f"setting VLLM_API_KEY is invalid: {exc}",
                hint="fix or unset VLLM_API_KEY in the environment",
            ) from None
        settings = settings.model_copy(update={"api_key": SecretStr(env["VLLM_API_KEY"])})
    return settings
