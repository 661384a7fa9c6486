"""Command-line flags built from a config dataclass's fields and its docstring.

The config dataclasses (:class:`~cmp_bayes.model.config.SamplerConfig`,
:class:`~cmp_bayes.model.config.ModelConfig`,
:class:`~cmp_bayes.simulation.simulator.SimulationConfig`,
:class:`~cmp_bayes.decision.costs.Costs`) are where each setting, its type,
its default and its meaning are written; the CLI reads them from there instead
of restating them, so a new field gets its flag and a changed docstring its
help text without a second edit (hand-copied flag lists had already lost
``--concentration`` and ``--base-rate``)::

    SAMPLER = DataclassFlags(SamplerConfig, choices={"sampler": SAMPLERS})
    SAMPLER.add_to(parser)               # --sampler, --draws, --tune, ...
    overrides = SAMPLER.overrides(args)  # only the flags given on the line

Every generated flag defaults to ``None``, so ``overrides`` holds exactly what
the user typed and the dataclass (or a preset, or a TOML file) supplies the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: numpy-docstring sections that describe a dataclass's fields
_SECTIONS: tuple[str, ...] = ("Attributes", "Parameters")
_ENTRY = re.compile(r"^(?P<names>[A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*:\s*(?P<type>.*)$")
_BRACES = re.compile(r"^\{(?P<items>[^}]*)\}")


@dataclass(frozen=True)
class FieldDoc:
    """What a docstring says about one field.

    Attributes
    ----------
    type : str
        The type spec after ``name :`` (e.g. ``int`` or ``{"tau", "utility"}``).
    text : str
        The description, joined into one line (may be empty).
    """

    type: str
    text: str


def field_docs(cls: type) -> dict[str, FieldDoc]:
    """Field name -> its entry in the class docstring's Attributes/Parameters section.

    An entry naming several fields (``draws, tune, chains : int``) documents each.
    """
    lines = (cls.__doc__ or "").expandtabs().splitlines()
    out: dict[str, FieldDoc] = {}
    i = 0
    while i < len(lines):
        if lines[i].strip() in _SECTIONS and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}:
            indent = len(lines[i]) - len(lines[i].lstrip())
            i += 2
            names: list[str] = []
            spec = ""
            text: list[str] = []
            while i < len(lines):
                line = lines[i]
                stripped = line.strip()
                here = len(line) - len(line.lstrip())
                # the next section header (or the end of the docstring) closes this one
                if stripped and here <= indent and not _ENTRY.match(stripped):
                    break
                if stripped and here <= indent:
                    for name in names:
                        out[name] = FieldDoc(spec, " ".join(text))
                    m = _ENTRY.match(stripped)
                    assert m is not None
                    names = [n.strip() for n in m["names"].split(",")]
                    spec, text = m["type"].strip(), []
                elif stripped:
                    text.append(stripped)
                i += 1
            for name in names:
                out[name] = FieldDoc(spec, " ".join(text))
            continue
        i += 1
    return out


def _first_sentence(text: str) -> str:
    text = text.replace("``", "")
    m = re.search(r"(?<![.\s][a-z])\.(\s|$)", text)
    return text[: m.start() + 1] if m else text


def _doc_choices(spec: str) -> tuple[str, ...] | None:
    m = _BRACES.match(spec)
    if not m:
        return None
    items = [s.strip().strip("\"'") for s in m["items"].split(",")]
    return tuple(s for s in items if s) or None


@dataclass(frozen=True)
class _Flag:
    field: str
    flag: str
    dest: str
    kind: str  # "scalar", "bool" or "pair"
    type: type
    choices: tuple[Any, ...] | None
    help: str


def _resolve(hint: Any) -> tuple[str, type, tuple[Any, ...] | None]:
    """(kind, element type, choices) of a field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _resolve(args[0])
    if origin is typing.Literal:
        values = typing.get_args(hint)
        return "scalar", type(values[0]), tuple(values)
    if origin is tuple:
        items = typing.get_args(hint)
        if items and all(a is items[0] for a in items) and items[0] in (int, float):
            return f"tuple{len(items)}", items[0], None
    if hint is bool:
        return "bool", bool, None
    if hint in (int, float, str):
        return "scalar", hint, None
    raise TypeError(f"no command-line flag for a field of type {hint!r}")


class DataclassFlags:
    """argparse options for the fields of one config dataclass.

    Parameters
    ----------
    cls : type
        A dataclass whose docstring documents its fields in a numpy
        ``Attributes`` or ``Parameters`` section.
    only : iterable of str, optional
        The fields that get a flag (default: every field), in the class's order.
    exclude : iterable of str
        Fields that get no flag (e.g. one the verb spells its own way).
    rename : mapping of str to str, optional
        Field -> flag for flags that are not ``--field-name``.
    choices : mapping of str to sequence, optional
        Field -> allowed values, for ``str`` fields whose values live in a
        constant (``SAMPLERS``). Without it a ``Literal`` type or a
        ``{"a", "b"}`` type spec in the docstring gives the choices.
    dest_prefix : str
        Prefix of the ``argparse.Namespace`` attribute of each flag, for verbs
        where two dataclasses share a field name.
    show_defaults : bool
        Append the dataclass default to each help text. Off where something
        else (a preset) supplies the defaults.

    Notes
    -----
    ``bool`` fields become ``--name / --no-name``; ``tuple[float, float]``
    fields take two numbers; ``X | None`` fields take an ``X``. Every flag
    defaults to ``None`` so :meth:`overrides` holds only what was given.
    """

    def __init__(
        self,
        cls: type,
        *,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        rename: Mapping[str, str] | None = None,
        choices: Mapping[str, Sequence[Any]] | None = None,
        dest_prefix: str = "",
        show_defaults: bool = True,
    ) -> None:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a dataclass")
        self.cls = cls
        fields = {f.name: f for f in dataclasses.fields(cls)}
        wanted = list(fields) if only is None else list(only)
        for name in [*wanted, *exclude, *(rename or {}), *(choices or {})]:
            if name not in fields:
                raise ValueError(f"{cls.__name__} has no field {name!r}")
        skip = set(exclude)
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        self._flags: list[_Flag] = []
        for name in wanted:
            if name in skip:
                continue
            kind, typ, found = _resolve(hints[name])
            doc = docs.get(name, FieldDoc("", ""))
            allowed = (choices or {}).get(name) or found or (
                _doc_choices(doc.type) if typ is str else None
            )
            text = _first_sentence(doc.text) or f"{cls.__name__}.{name}"
            default = fields[name].default
            if show_defaults and default not in (dataclasses.MISSING, None):
                text = f"{text} (default {_show(default)})"
            self._flags.append(
                _Flag(
                    field=name,
                    flag=(rename or {}).get(name, "--" + name.replace("_", "-")),
                    dest=dest_prefix + name,
                    kind=kind,
                    type=typ,
                    choices=tuple(allowed) if allowed else None,
                    # argparse formats help with %, so a literal percent sign must be doubled
                    help=text.replace("%", "%%"),
                )
            )

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields that have a flag, in order."""
        return tuple(f.field for f in self._flags)

    @property
    def flags(self) -> dict[str, str]:
        """Field -> flag (``"draws"`` -> ``"--draws"``)."""
        return {f.field: f.flag for f in self._flags}

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """Add every flag to ``parser`` (or an argument group of it)."""
        for f in self._flags:
            if f.kind == "bool":
                parser.add_argument(
                    f.flag, dest=f.dest, action=argparse.BooleanOptionalAction, default=None,
                    help=f.help,
                )
            elif f.kind.startswith("tuple"):
                n = int(f.kind.removeprefix("tuple"))
                parser.add_argument(
                    f.flag, dest=f.dest, type=f.type, nargs=n, default=None,
                    metavar=tuple(f"{f.field.upper()}{i + 1}" for i in range(n)), help=f.help,
                )
            else:
                parser.add_argument(
                    f.flag, dest=f.dest, type=f.type, choices=f.choices, default=None,
                    metavar=None if f.choices else f.field.upper(), help=f.help,
                )

    def overrides(self, args: argparse.Namespace) -> dict[str, Any]:
        """Field -> value for every flag given on the command line (and only those)."""
        out: dict[str, Any] = {}
        for f in self._flags:
            value = getattr(args, f.dest, None)
            if value is not None:
                out[f.field] = tuple(value) if f.kind.startswith("tuple") else value
        return out

    def argv(self, config: Any) -> list[str]:
        """The command-line words that reproduce ``config``'s values of the flagged fields."""
        if not isinstance(config, self.cls):
            raise TypeError(f"expected a {self.cls.__name__}, got {type(config).__name__}")
        words: list[str] = []
        for f in self._flags:
            value = getattr(config, f.field)
            if value is None:
                continue
            if f.kind == "bool":
                words.append(f.flag if value else "--no-" + f.flag.removeprefix("--"))
            elif f.kind.startswith("tuple"):
                words += [f.flag, *(repr(v) for v in value)]
            else:
                words += [f.flag, str(value) if f.type is str else repr(value)]
        return words


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, str):
        return value
    return str(value)
