"""Settings from the environment (`BENCH_*`, nested with `__`), built once in the CLI.

Each subsystem owns a nested model here; the resolved settings go into every bundle
with secrets shown as ********.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from bench.errors import SettingsError, first_problem
from bench.logs import LogFormat


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BENCH_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    log_format: LogFormat = "auto"
    log_level: str = "info"
    # The API key of the server under test. Only from the environment (BENCH_API_KEY,
    # or VLLM_API_KEY as vLLM itself reads it); never a command-line flag.
    api_key: SecretStr | None = None
    # A PEM file of the CA (or the self-signed certificate) an https:// server under test
    # is checked against instead of the system's (BENCH_CA_FILE).
    ca_file: str | None = None

    def redacted(self) -> dict[str, Any]:
        """The resolved settings as recorded in bundles: secrets as ********."""
        out = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is not None and "SecretStr" in str(field.annotation):
                out[name] = "********" if getattr(self, name) is not None else None
        return out


def _nested(env: dict[str, str]) -> dict[str, Any]:
    """BENCH_A__B=v -> {"a": {"b": "v"}}; every BENCH_* variable is kept so unknown ones fail."""
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("BENCH_"):
            continue
        path = key[len("BENCH_") :].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
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
        settings = settings.model_copy(update={"api_key": SecretStr(env["VLLM_API_KEY"])})
    return settings
