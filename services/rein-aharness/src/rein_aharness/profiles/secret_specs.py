"""A profile's secrets by file: `command.secrets: [{name, file, env?}]`.

`name` is the file's name inside the sandbox (`$REIN_SECRETS_DIR/NAME`), `file` the
absolute host path the worker reads it from (a mounted Kubernetes Secret), `env` an
optional variable of the approach alone that carries it too. Strict: names and env
variables of the EnvName shape and unique, never a reserved variable (the worker's own,
git's, the run's `REIN_*`, the loader's `LD_*`, or PATH/HOME, which the allowlist owns).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["SecretSpec", "reserved_secret_env", "unique_secrets"]

_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
SecretName = Annotated[str, StringConstraints(pattern=_NAME)]
_RESERVED = re.compile(r"^(ACTIVITY_CORE_|REIN_|GIT_|LD_|OPS_)|^(PATH|HOME)$", re.IGNORECASE)


def reserved_secret_env(name: str) -> bool:
    return _RESERVED.match(name) is not None


def _env(name: str) -> str:
    if reserved_secret_env(name):
        raise ValueError(f"{name}: a reserved variable cannot carry a secret")
    return name


def _file(path: str) -> str:
    if not path.startswith("/") or "\x00" in path:
        raise ValueError("a secret's file must be an absolute path")
    return path


class SecretSpec(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    name: SecretName
    file: Annotated[str, Field(min_length=2, max_length=4096), AfterValidator(_file)]
    env: Annotated[SecretName, AfterValidator(_env)] | None = None


def unique_secrets(secrets: list[SecretSpec]) -> list[SecretSpec]:
    names = [s.name for s in secrets]
    envs = [s.env for s in secrets if s.env is not None]
    if len(set(names)) != len(names) or len(set(envs)) != len(envs):
        raise ValueError("secret names and env variables must be unique")
    return secrets
