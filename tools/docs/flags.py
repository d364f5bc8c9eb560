"""Every flag of a click command as its ``--help`` would say it, for a table.

The programs are click commands; reading their parameters (rather than the
text ``--help`` wraps) gives each flag's spellings, the variable it is also
read from (its own, or ``<PREFIX>_<NAME>`` under ``auto_envvar_prefix``, as
click resolves it), its default and its help.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from tools.docs.schema import one_line


@dataclass(frozen=True)
class Flag:
    """One option of a command."""

    names: tuple[str, ...]
    variable: str
    type: str
    default: str
    help: str


@dataclass(frozen=True)
class Command:
    """A command, its usage line, its help and its flags."""

    path: str
    """The command as typed: ``controlplane-backup verify``."""
    usage: str
    help: str
    flags: tuple[Flag, ...]


def command(program: click.Command, *names: str) -> Command:
    """The command ``names`` of ``program`` (``program`` itself without names)."""
    found = program
    path = [str(program.name)]
    parent = click.Context(program, info_name=program.name)
    context = parent
    for name in names:
        assert isinstance(found, click.Group), f"{found.name} has no sub-commands"
        found = found.commands[name]
        path.append(name)
        context = click.Context(found, info_name=name, parent=context)
    prefix = program.context_settings.get("auto_envvar_prefix")
    pieces = " ".join(found.collect_usage_pieces(context))
    return Command(
        path=" ".join(path),
        usage=f"{' '.join(path)} {pieces}".strip(),
        help=(found.help or "").split("\f")[0].strip(),
        flags=tuple(
            _flag(param, prefix, context)
            for param in found.params
            if isinstance(param, click.Option) and not param.hidden
        ),
    )


def subcommands(program: click.Group) -> list[str]:
    """The names of a group's sub-commands, in the order ``--help`` lists them."""
    return sorted(program.commands)


def _flag(option: click.Option, prefix: str | None, context: click.Context) -> Flag:
    return Flag(
        names=(*option.opts, *option.secondary_opts),
        variable=_variable(option, prefix),
        type=_type(option),
        default=_default(option, context),
        help=one_line(option.help or ""),
    )


def _variable(option: click.Option, prefix: str | None) -> str:
    if isinstance(option.envvar, str):
        names = [option.envvar]
    elif option.envvar:
        names = list(option.envvar)
    elif prefix and option.allow_from_autoenv and option.name:
        names = [f"{prefix}_{option.name.upper()}"]
    else:
        return ""
    # A repeatable flag's variable holds its values separated by spaces (click splits it).
    return ", ".join(names) + (" (space separated)" if option.multiple else "")


def _type(option: click.Option) -> str:
    if option.is_flag:
        return "flag"
    kind = option.type
    if isinstance(kind, click.Choice):
        text = "one of " + ", ".join(str(choice) for choice in kind.choices)
    elif isinstance(kind, click.IntRange | click.FloatRange):
        text = f"{kind.name}, {_range(kind)}"
    else:
        text = kind.name
    if option.multiple:
        text += ", repeatable"
    return f"{text}, required" if option.required else text


def _default(option: click.Option, context: click.Context) -> str:
    if isinstance(option.show_default, str):
        return option.show_default
    value = option.get_default(context, call=False)
    if option.is_flag:
        return "on" if value else "off"
    # None, nothing repeated, or click's own marker of a default left unset.
    if not isinstance(value, str | int | float | tuple | list) or value in ((), []):
        return ""
    return str(value)


def _range(kind: click.IntRange | click.FloatRange) -> str:
    """The bounds as ``--help`` words them: ``x>=0``, ``1<=x<=10``."""
    low = f"{kind.min}{'<' if kind.min_open else '<='}" if kind.min is not None else ""
    high = f"{'<' if kind.max_open else '<='}{kind.max}" if kind.max is not None else ""
    if low and not high:
        return f"x{'>' if kind.min_open else '>='}{kind.min}"
    return f"{low}x{high}"
