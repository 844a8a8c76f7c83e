"""Settings declared once: a config field names its variable, default, bounds and help.

::

    @dataclass(frozen=True)
    class BrokerConfig:
        port: int = setting("Bind port; 0 picks a free one", env="LLOG_BROKER_PORT",
                            default=8080, min=0, max=65_535)

Everything else about a setting is derived from that declaration:

- :func:`from_env` reads the variables (a blank value means unset), parses
  them and builds the config; a value that does not parse names the variable
  and the text (``LLOG_BROKER_PORT must be an integer, got 'x'``);
- :func:`check_settings`, called from a config's ``__post_init__``, enforces
  the type, choices and bounds of every declared field, whoever built the
  config, naming the variable, the bound and the value
  (``LLOG_BROKER_PORT must be 0-65535, got 70000``); rules between fields
  stay in ``__post_init__``;
- :class:`Flags` adds the command-line flags that override a config's
  settings (name, type and help from the declaration) and reads them back;
  :func:`environment_help` lists the variables a process reads, with their
  defaults, for its ``--help``;
- :func:`env_example` renders ``.env.example`` (``python -m server._env_example``).

A setting without ``env`` is an option of a client config (``ProducerConfig``):
bounds, help and the Spark option name, no variable. :func:`same_as` lets a
second config carry a setting declared elsewhere without declaring it again.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence, TypeVar

from ._errors import ConfigError

__all__ = [
    "REQUIRED", "Setting", "Declared", "Flags", "Section", "setting", "same_as", "nested", "declared",
    "check_settings", "from_env", "values_from_env", "parse_text", "check_value", "shown_default",
    "env_value", "flag_help", "environment_help", "env_example", "masked_repr", "env_str", "env_int",
]

MIB = 1024 * 1024
_SETTING = "llog.setting"
_NESTED = "llog.nested"
_WIDTH = 79
C = TypeVar("C")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a setting that has none: ``from_env`` fails when its variable is unset."""


@dataclass(frozen=True)
class Setting:
    """One declared setting, kept in its config field's ``metadata`` (:func:`setting`)."""

    help: str
    """One or two sentences for ``--help`` and ``.env.example``."""
    env: str | None = None
    """The variable; None for a client option without one."""
    kind: type = str
    """int, float, bool or str: how text parses and what the constructor accepts."""
    min: float | None = None
    """Inclusive bounds (a string's length for str)."""
    max: float | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None
    """Text -> value for anything else (raises ConfigError or ValueError)."""
    fallback_env: tuple[str, ...] = ()
    """Variables read when ``env`` is unset (``AWS_REGION``)."""
    example: str | None = None
    """The value ``.env.example`` shows where the default is not one."""
    start_default: Callable[[], Any] | None = None
    """``from_env``'s default, computed when the process starts (``broker-{host}-{pid}``)..."""
    start_default_text: str | None = None
    """... and how help shows it (``broker-HOST-PID``)."""
    why: str = ""
    """Appended to a bound error: what goes wrong beyond the bound."""
    option: str | None = None
    """The Spark data source option (client settings)."""
    flag: bool = True
    """Whether command lines offer a flag for it."""
    secret: bool = False
    """Masked in ``repr``."""


class Declared(NamedTuple):
    """A config field and its setting."""

    name: str
    default: Any
    """The field's default, or :data:`REQUIRED`."""
    setting: Setting

    @property
    def label(self) -> str:
        """How errors name it: the variable, else the field."""
        return self.setting.env or self.name


def setting(help: str, *, default: Any = REQUIRED, **declaration: Any) -> Any:
    """A dataclass field with ``default`` that carries its :class:`Setting`
    (``declaration``: the other fields of :class:`Setting`). ``kind`` defaults
    to the default's type (str for None or :data:`REQUIRED`)."""
    declaration.setdefault("kind", str if default is None or default is REQUIRED else type(default))
    for name in ("choices", "fallback_env"):
        declaration[name] = tuple(declaration.get(name, ()))
    metadata = {_SETTING: Setting(help=help, **declaration)}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def same_as(config: type, name: str) -> Any:
    """A field with the declaration (and default) of ``config.name``: one rule, two configs."""
    source = {f.name: f for f in dataclasses.fields(config)}[name]
    if source.default is dataclasses.MISSING:
        return dataclasses.field(metadata=source.metadata)
    return dataclasses.field(default=source.default, metadata=source.metadata)


def nested(config: type) -> Any:
    """A field holding another config, read by its own ``from_env``."""
    return dataclasses.field(default_factory=config, metadata={_NESTED: config})


@functools.cache
def declared(config: type) -> tuple[Declared, ...]:
    """The declared settings of a config class, in field order."""
    out = []
    for f in dataclasses.fields(config):
        declaration = f.metadata.get(_SETTING)
        if declaration is not None:
            default = REQUIRED if f.default is dataclasses.MISSING else f.default
            out.append(Declared(f.name, default, declaration))
    return tuple(out)


# -- validation -----------------------------------------------------------------------------------


def check_settings(config: object) -> None:
    """Type, choices and bounds of every declared field of ``config``; ConfigError names the first bad one."""
    for d in declared(type(config)):
        check_value(d, getattr(config, d.name), d.label)


def check_value(d: Declared, value: Any, label: str) -> None:
    s = d.setting
    if value is None:
        if d.default is None:
            return
        raise ConfigError(f"{label} must be set")
    _check_kind(s.kind, value, label)
    if s.kind is str and not value and d.default is not None:
        raise ConfigError(f"{label} must not be empty")
    if s.choices and value not in s.choices:
        raise ConfigError(f"{label} must be one of {', '.join(s.choices)}, got {value!r}")
    measure = len(value) if isinstance(value, str) else value
    if (s.min is not None and measure < s.min) or (s.max is not None and measure > s.max):
        why = f": {s.why}" if s.why else ""
        raise ConfigError(f"{label} must be {_bounds(s)}, got {value!r}{why}")


def _check_kind(kind: type, value: Any, label: str) -> None:
    if kind is bool:
        ok, what = isinstance(value, bool), "true or false"
    elif kind is int:
        ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif kind is float:
        ok, what = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif kind is str:
        ok, what = isinstance(value, str), "a string"
    else:
        return
    if not ok:
        raise ConfigError(f"{label} must be {what}, got {value!r}")


def _bounds(s: Setting) -> str:
    low, high = (_number(b) for b in (s.min, s.max))
    if s.min is not None and s.max is not None:
        text = f"{low}-{high}"
    else:
        text = f">= {low}" if s.min is not None else f"<= {high}"
    if s.kind is str:
        return f"{text} characters long"
    return f"a number {text}" if s.kind is float else text


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# -- the environment ------------------------------------------------------------------------------


def env_str(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """The stripped value of ``name``; blank or missing means ``default``."""
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env_str(env, name)
    return default if raw is None else _parse_int(raw, name)


def _parse_int(raw: str, label: str) -> int:
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        raise ConfigError(f"{label} must be an integer, got {raw!r}") from None


def _parse_bool(raw: str, label: str) -> bool:
    low = raw.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(low) != 0
    except ValueError:
        raise ConfigError(f"{label} must be 1 or 0 (or true/false), got {raw!r}") from None


def parse_text(d: Declared, raw: str, label: str) -> Any:
    """The value of ``raw`` (a variable's or an option's text); errors name ``label``."""
    s = d.setting
    raw = raw.strip()
    if s.parse is not None:
        try:
            return s.parse(raw)
        except ConfigError as exc:
            raise ConfigError(exc.message if label in exc.message else f"{label}: {exc.message}") from None
        except ValueError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    if s.kind is int:
        return _parse_int(raw, label)
    if s.kind is float:
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{label} must be a number, got {raw!r}") from None
    if s.kind is bool:
        return _parse_bool(raw, label)
    return raw.lower() if s.choices else raw


def _read(d: Declared, env: Mapping[str, str]) -> Any:
    s = d.setting
    assert s.env is not None
    raw = env_str(env, s.env)
    for other in s.fallback_env:
        raw = raw if raw is not None else env_str(env, other)
    if raw is not None:
        return parse_text(d, raw, s.env)
    if s.start_default is not None:
        return s.start_default()
    if d.default is REQUIRED:
        example = f", e.g. {s.example}" if s.example else ""
        raise ConfigError(f"{s.env} is not set: {s.help}{example}")
    return d.default


def values_from_env(
    config: type, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The constructor arguments of ``config`` from ``env`` (``os.environ`` by
    default); ``overrides`` that are not None win (command-line flags)."""
    env = os.environ if env is None else env
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in given:
            values[f.name] = given.pop(f.name)
        elif _NESTED in f.metadata:
            values[f.name] = f.metadata[_NESTED].from_env(env)
        elif _SETTING in f.metadata and f.metadata[_SETTING].env is not None:
            default = REQUIRED if f.default is dataclasses.MISSING else f.default
            values[f.name] = _read(Declared(f.name, default, f.metadata[_SETTING]), env)
    if given:
        raise TypeError(f"{config.__name__} has no setting {', '.join(sorted(given))}")
    return values


def from_env(config: type[C], env: Mapping[str, str] | None = None, **overrides: Any) -> C:
    """``config`` built from the environment; see :func:`values_from_env`."""
    return config(**values_from_env(config, env, overrides))


def masked_repr(config: object) -> str:
    """``repr`` with the values of secret settings replaced by ``***``."""
    secret = {d.name for d in declared(type(config)) if d.setting.secret}
    shown = []
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        shown.append(f"{f.name}={repr('***') if f.name in secret and value else repr(value)}")
    return f"{type(config).__name__}({', '.join(shown)})"


# -- how a default reads --------------------------------------------------------------------------


def env_value(d: Declared) -> str:
    """The text of the default as a variable's value (``.env.example``): the
    example where the default is not a value; empty when unset."""
    s = d.setting
    if s.example is not None and (d.default in (REQUIRED, None) or s.start_default is not None):
        return s.example
    if d.default is REQUIRED or d.default is None or s.start_default is not None:
        return ""
    if isinstance(d.default, bool):
        return "1" if d.default else "0"
    if isinstance(d.default, tuple):
        return ",".join(str(item) for item in d.default)
    return str(d.default)


def _size_note(d: Declared) -> str:
    value = d.default
    if "bytes" in d.name.split("_") and isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f" ({value // MIB} MiB)"
    return ""


def _env_comment(d: Declared) -> str:
    """The comment above a variable in ``.env.example``: its help, the size of a
    byte default, what an unset variable means when that is computed at start."""
    text = _full_help(d)
    note = _size_note(d).strip(" ()") or (f"unset: {d.setting.start_default_text}"
                                          if d.setting.start_default_text else "")
    return f"{text.removesuffix('.')} ({note})." if note else text


def shown_default(d: Declared) -> str:
    """``default 8388608 (8 MiB)``, ``default broker-HOST-PID``, ``required, e.g. ...``, ``unset by default``."""
    s = d.setting
    if s.start_default_text is not None:
        return f"default {s.start_default_text}"
    if d.default is REQUIRED:
        return "required" + (f", e.g. {s.example}" if s.example else "")
    if d.default is None or d.default == ():
        return "unset by default"
    return f"default {env_value(d)}{_size_note(d)}"


def _full_help(d: Declared) -> str:
    text, fallback = d.setting.help, d.setting.fallback_env
    if fallback:
        text = f"{text.removesuffix('.')} (falls back to {' / '.join(fallback)})."
    return text


def flag_help(d: Declared) -> str:
    """The help of a flag: the setting's help, its variable and its default."""
    s = d.setting
    where = f"{s.env}, " if s.env else f"Spark writer option {s.option}, " if s.option else ""
    return f"{_full_help(d).removesuffix('.')} ({where}{shown_default(d)})"


def _metavar(d: Declared) -> str | None:
    if d.setting.kind is int:
        words = d.name.split("_")
        return "MS" if "ms" in words else "BYTES" if "bytes" in words else "N"
    return "X" if d.setting.kind is float else None


# -- command lines --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flags:
    """The flags through which a command line overrides one config's settings.

    ``--{prefix}{field}`` (underscores as dashes) for every declared field
    but ``skip``; a bool gets ``--x/--no-x``. Every flag defaults to None
    (not given), so the environment applies unless it is given.
    """

    config: type
    prefix: str = ""
    skip: tuple[str, ...] = ()

    def declared(self) -> tuple[Declared, ...]:
        return tuple(d for d in declared(self.config) if d.setting.flag and d.name not in self.skip)

    def flag(self, d: Declared) -> str:
        return "--" + (self.prefix + d.name).replace("_", "-")

    def dest(self, d: Declared) -> str:
        return (self.prefix + d.name).replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        for d in self.declared():
            s = d.setting
            kwargs: dict[str, Any] = {"dest": self.dest(d), "default": None, "help": flag_help(d).replace("%", "%%")}
            if s.kind is bool and s.parse is None:
                kwargs["action"] = argparse.BooleanOptionalAction
            elif s.choices:
                kwargs["choices"] = s.choices
            elif s.parse is None and s.kind in (int, float):
                kwargs.update(type=s.kind, metavar=_metavar(d))
            parser.add_argument(self.flag(d), **kwargs)

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The given flags' values by field name (parsed as the variable would be)."""
        out: dict[str, Any] = {}
        for d in self.declared():
            value = getattr(args, self.dest(d), None)
            if value is not None:
                out[d.name] = parse_text(d, value, self.flag(d)) if d.setting.parse is not None else value
        return out


def environment_help(configs: Sequence[type], *, skip: Sequence[str] = ()) -> str:
    """One entry per variable of ``configs`` (but ``skip``): name, default, help; for an epilog."""
    lines: list[str] = []
    for config in configs:
        for d in declared(config):
            if d.setting.env is None or d.setting.env in skip:
                continue
            lines.append(f"  {d.setting.env}, {shown_default(d)}")
            lines += textwrap.wrap(_full_help(d), 92, initial_indent="      ", subsequent_indent="      ",
                                   break_on_hyphens=False)
    return "\n".join(lines)


# -- .env.example ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """A section of ``.env.example``: a title, an optional note, one config's variables."""

    title: str
    config: type
    note: str = ""


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, _WIDTH, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)


def env_example(header: str, sections: Sequence[Section]) -> str:
    """``.env.example``: ``header``, then per section its variables, each
    with its help as a comment and its default (or example) as the value.
    A variable already shown in an earlier section is not repeated."""
    out = [header.rstrip("\n"), ""]
    seen: set[str] = set()
    for section in sections:
        out.append(f"# --- {section.title} ".ljust(_WIDTH, "-"))
        if section.note:
            out += _comment(section.note) + [""]
        for d in declared(section.config):
            if d.setting.env is None or d.setting.env in seen:
                continue
            seen.add(d.setting.env)
            out += _comment(_env_comment(d))
            out.append(f"{d.setting.env}={env_value(d)}")
        out.append("")
    return "\n".join(out[:-1]) + "\n"
