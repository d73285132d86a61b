"""``permindex serve`` options from a TOML file and from environment variables.

Every option ``--some-option`` of ``serve`` can also be given as ``some_option = VALUE`` (or
``some-option``) in the TOML file named by ``--config FILE`` (top level, or under a ``[serve]``
table), and as the environment variable ``PERMINDEX_SOME_OPTION``. Precedence, highest first:
command-line flags, environment variables, the file, the built-in defaults. Values are checked
as the flag's would be (a misspelled key or a bad value is an error naming its source); a switch
(``--insecure``) takes ``true``/``false`` in TOML and ``1``/``0``, ``true``/``false``,
``yes``/``no`` in the environment.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["ENV_PREFIX", "ConfigError", "apply_defaults", "config_path", "describe"]

ENV_PREFIX: Final = "PERMINDEX_"
_NOT_OPTIONS: Final = frozenset({"help", "config"})
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


class ConfigError(ValueError):
    """A bad value or key in the file or the environment; the message names its source."""


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The serve options by destination name (``data_dir``)."""
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and action.dest not in _NOT_OPTIONS
    }


def _convert(action: argparse.Action, value: Any, source: str) -> Any:
    flag = action.option_strings[0]
    if isinstance(action, argparse._StoreTrueAction):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ConfigError(f"{source}: {flag} is a switch: true or false, not {value!r}")
    if isinstance(value, bool) or isinstance(value, dict | list):
        raise ConfigError(f"{source}: {flag} takes a value, not {value!r}")
    text = str(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as error:
        raise ConfigError(f"{source}: {flag} {text!r}: {error}") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{source}: {flag} {text!r}: choose from {choices}")
    return converted


def apply_defaults(
    parser: argparse.ArgumentParser, config_file: str | None, environ: Mapping[str, str]
) -> None:
    """Set the defaults of ``parser`` (the serve subparser) from ``config_file`` (TOML) and
    then from ``environ``, so that flags given on the command line still win.

    Raises:
        ConfigError: an unknown key, a bad value, an unreadable or malformed file.
    """
    options = _options(parser)
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            with open(config_file, "rb") as file:
                table = tomllib.load(file)
        except OSError as error:
            raise ConfigError(f"--config {config_file}: {error.strerror or error}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"--config {config_file}: not valid TOML: {error}") from None
        if isinstance(table.get("serve"), dict):
            table = table["serve"]
        for key, value in table.items():
            dest = key.replace("-", "_")
            if dest not in options:
                known = ", ".join(sorted(options))
                raise ConfigError(f"{config_file}: unknown option {key!r} (known: {known})")
            values[dest] = _convert(options[dest], value, f"{config_file}: {key}")
    for dest, action in options.items():
        name = ENV_PREFIX + dest.upper()
        if name in environ:
            values[dest] = _convert(action, environ[name], f"environment {name}")
    parser.set_defaults(**values)


def describe(parser: argparse.ArgumentParser) -> str:
    """The epilog of ``serve --help``: the file and environment names of every option."""
    lines = [
        "configuration: every option is also read from the TOML file of --config FILE",
        "(`option_name = value`, at the top or under [serve]) and from the environment",
        f"({ENV_PREFIX}OPTION_NAME); flags > environment > file > defaults.",
    ]
    for dest, action in _options(parser).items():
        default = action.default
        shown = "off" if default is None or default is False else default
        lines.append(f"  {action.option_strings[0]:<24} {ENV_PREFIX + dest.upper():<36} {shown}")
    return "\n".join(lines)


def config_path(argv: list[str]) -> str | None:
    """The value of ``--config`` in ``argv`` (``--config FILE`` or ``--config=FILE``), or
    ``PERMINDEX_CONFIG`` from the environment."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return os.environ.get(ENV_PREFIX + "CONFIG") or None
