"""What the API's verbs share: their default log, the configuration they take, and turning the errors of what they
call into the API's exceptions."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pipelines.config import Config, load_config as _load
from pipelines.errors import ConfigError, TfpipeError, typed

Log = Callable[[str], None]
F = TypeVar("F", bound=Callable[..., Any])

_LOGGER = logging.getLogger("tfpipe")


def logger(line: str) -> None:
    """The default `log` of the verbs: each line to the `tfpipe` logger at INFO."""
    _LOGGER.info(line)


def config_of(config: Config | str | Path | None) -> Config:
    """`config` itself, or loaded from its path (None: the defaults, the environment's overrides applied)."""
    return config if isinstance(config, Config) else _load(config)


@contextlib.contextmanager
def raising(kind: type[TfpipeError], *errors: type[Exception]) -> Iterator[None]:
    """Raise `errors` inside as `kind`, same message."""
    try:
        yield
    except errors as e:
        raise kind(str(e)) from None


@contextlib.contextmanager
def cloud_call() -> Iterator[None]:
    """Raise an error of a cloud call inside as CredentialsError or CloudError (its one line); others as they
    are."""
    try:
        yield
    except TfpipeError:
        raise
    except Exception as e:
        error = typed(e)
        if error is None:
            raise
        raise error from e


def public(func: F) -> F:
    """A verb of the API: the errors of the cloud calls it makes raised as the API's exceptions."""

    @functools.wraps(func)
    def verb(*args: Any, **kwargs: Any) -> Any:
        with cloud_call():
            return func(*args, **kwargs)

    return verb  # type: ignore[return-value]


def check_folder(path: str | Path, what: str) -> Path:
    """`path` resolved and created with its parents; ConfigError about the argument `what` when it cannot be."""
    folder = Path(path).resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the folder {e.filename or folder}: {e.strerror or e}", what) from None
    return folder
