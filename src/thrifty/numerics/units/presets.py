"""Preset matrix units: the lookup of the per-GPU tables of :mod:`.gpus`.

A preset is data: an :class:`ArchTable` per architecture lists, for each instruction and
input/output configuration the hardware offers, the :class:`UnitModel` parameters and the
source of each one (paper, model file, or measurement); :func:`preset` turns one row into a
:class:`UnitModel`, and a configuration the table does not hold is refused with the reason
the table gives, or with the valid choices. A table's first instruction is its default
(``mma.sync`` on NVIDIA GPUs; Hopper adds ``wgmma``, Blackwell ``tcgen05.mma``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from thrifty.errors import FormatError
from thrifty.numerics.formats import get_format
from thrifty.numerics.units.engine import Unit
from thrifty.numerics.units.model import UnitModel


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter value of a preset and where it comes from."""

    value: Any
    source: str


@dataclass(frozen=True, slots=True)
class Config:
    """The parameters of the configurations ``inputs x outputs`` of one architecture.

    ``params`` maps :class:`UnitModel` field names to :class:`Param`; fields not named
    keep the :class:`UnitModel` defaults. ``instruction``: the instruction the row models
    (``None``: the table's default instruction).
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: Mapping[str, Param]
    instruction: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Configurations ``inputs x outputs`` that the preset refuses, and why (for one
    instruction, or for every one when ``instruction`` is ``None``)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    reason: str
    instruction: str | None = None


@dataclass(frozen=True, slots=True)
class ArchTable:
    """Everything thrifty knows about one architecture's matrix unit, as data."""

    name: str
    hardware: str
    configs: tuple[Config, ...]
    refusals: tuple[Refusal, ...] = ()
    aliases: tuple[str, ...] = ()
    validated: tuple[str, ...] = ()
    instructions: tuple[str, ...] = ("mma.sync",)

    def _rows(self, instruction: str | None) -> list[Config]:
        instr = self.instructions[0] if instruction is None else instruction
        return [c for c in self.configs if (c.instruction or self.instructions[0]) == instr]

    def inputs(self, instruction: str | None = None) -> tuple[str, ...]:
        """The input formats of every configuration of ``instruction`` (default: the
        table's default instruction), in table order."""
        return tuple(dict.fromkeys(f for c in self._rows(instruction) for f in c.inputs))

    def outputs(self, fin: str, instruction: str | None = None) -> tuple[str, ...]:
        """The output formats offered for input format ``fin``."""
        return tuple(dict.fromkeys(f for c in self._rows(instruction) if fin in c.inputs
                                   for f in c.outputs))

    def model(self, fin: str, fout: str, instruction: str | None = None) -> UnitModel:
        """The :class:`UnitModel` of input ``fin`` and output ``fout`` (canonical names)
        through ``instruction`` (``None``: the table's default)."""
        instr = self.instructions[0] if instruction is None else str(instruction)
        if instr not in self.instructions:
            raise FormatError(f"unit {self.name!r} ({self.hardware}) has no {instr!r} "
                              f"instruction; valid: {', '.join(self.instructions)}")
        for r in self.refusals:
            if fin in r.inputs and fout in r.outputs and r.instruction in (None, instr):
                raise FormatError(f"unit {self.name!r} ({instr}): {fin} inputs with {fout} "
                                  f"output: {r.reason}")
        if fin not in self.inputs(instr):
            raise FormatError(f"unit {self.name!r} ({self.hardware}) has no {fin} input "
                              f"through {instr}; valid: {', '.join(self.inputs(instr))}")
        for c in self._rows(instr):
            if fin in c.inputs and fout in c.outputs:
                values = {k: p.value for k, p in c.params.items()}
                return UnitModel(name=self.name, input=fin, output=fout, instruction=instr,
                                 source=_sources(c.params), **values)
        outs = self.outputs(fin, instr)
        raise FormatError(f"unit {self.name!r} ({instr}): {fin} inputs accumulate in "
                          f"{' or '.join(outs)} only, not {fout}")


def _sources(params: Mapping[str, Param]) -> str:
    """``"source (field, field); source (field)"``: each source with what it sets."""
    by_source: dict[str, list[str]] = {}
    for name, p in params.items():
        by_source.setdefault(p.source, []).append(name)
    return "; ".join(f"{src} ({', '.join(names)})" for src, names in by_source.items())


@functools.cache
def _tables() -> dict[str, ArchTable]:
    from thrifty.numerics.units.gpus import TABLES

    return {t.name: t for t in TABLES}


@functools.cache
def _aliases() -> dict[str, str]:
    return {a: t.name for t in _tables().values() for a in t.aliases}


def unit_names() -> list[str]:
    """Names of the preset units."""
    return list(_tables())


def arch_table(name: str) -> ArchTable:
    """The :class:`ArchTable` of a preset unit name or alias.

    Example
    -------
    >>> arch_table("hopper").name
    'h100'
    """
    key = str(name).strip().lower()
    tables, aliases = _tables(), _aliases()
    key = aliases.get(key, key)
    if key not in tables:
        raise FormatError(f"unknown unit {name!r}; valid: {', '.join(tables)} (aliases: "
                          f"{', '.join(sorted(aliases))})")
    return tables[key]


def preset(name: str, input: str = "fp16", output: str = "fp32",
           instruction: str | None = None) -> UnitModel:
    """The :class:`UnitModel` of a preset unit for one input/output format pair.

    ``instruction`` picks the instruction where a GPU computes differently through
    several (``h100``/``h200``: ``mma.sync`` (default) or ``wgmma``; ``b200``:
    ``mma.sync`` (default) or ``tcgen05.mma``).

    Raises
    ------
    FormatError
        For an unknown unit (listing the valid ones), an instruction the unit lacks, or a
        format pair the instruction does not offer (with the reason).

    Example
    -------
    >>> preset("a100", "bf16").fma
    8
    >>> preset("h100", "e4m3", "fp32", instruction="wgmma").window_bits
    13
    """
    if not isinstance(name, str):
        raise FormatError(f"a preset unit is named by a string (one of "
                          f"{', '.join(unit_names())}), got {type(name).__name__}")
    table = arch_table(name)
    return table.model(get_format(input).name, get_format(output).name, instruction)


def unit(name: str | UnitModel, input: str | None = None, output: str | None = None,
         instruction: str | None = None, **overrides: object) -> Unit:
    """A :class:`Unit` for a preset name (or a :class:`UnitModel`), with optional overrides.

    ``input``/``output`` default to fp16/fp32 for a preset; given with a
    :class:`UnitModel`, they must agree with it. ``overrides`` are :class:`UnitModel`
    fields.

    Example
    -------
    >>> unit("h100", input="bf16", output="fp32").model.fma
    16
    """
    if isinstance(name, UnitModel):
        model = name
        for what, given, have in (("input", input, model.input),
                                  ("output", output, model.output)):
            if given is not None and get_format(given).name != have:
                raise FormatError(f"unit({model.name!r} model, {what}={given!r}): the model's "
                                  f"{what} is {have}; change it with a {what}= override")
        if instruction is not None and instruction != model.instruction:
            raise FormatError(f"unit({model.name!r} model, instruction={instruction!r}): the "
                              f"model's instruction is {model.instruction!r}")
    elif isinstance(name, str):
        model = preset(name, "fp16" if input is None else input,
                       "fp32" if output is None else output, instruction)
    else:
        raise FormatError(f"unit needs a preset name (one of {', '.join(unit_names())}) or a "
                          f"UnitModel, got {type(name).__name__}")
    if overrides:
        unknown = sorted(set(overrides) - set(UnitModel.__dataclass_fields__))
        if unknown:
            raise FormatError(f"unknown UnitModel field(s) {', '.join(unknown)}; valid: "
                              f"{', '.join(UnitModel.__dataclass_fields__)}")
        model = replace(model, **overrides)  # type: ignore[arg-type]
    return Unit(model)
