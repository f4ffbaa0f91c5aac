"""The one exception type that means "the user's input is wrong", and mosaic's warning.

The CLI turns it into a single line on stderr and a non-zero exit; library callers can
catch it like any ValueError.
"""


class MosaicInputError(ValueError):
    """Bad user input: the message names the field, the bad value and what is allowed."""


class InvalidLayoutError(MosaicInputError):
    """A job's parallel layout breaks a layout rule; the message starts 'invalid parallel
    layout' and names the rule (callers add the file and the ``--set`` that made it)."""


SHOWN_CHARS = 60  # of a value a message echoes (a line stays readable on a terminal)


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """How a message echoes a value the user gave: its repr, and for a longer one its first
    ``limit`` characters and its length (`mosaic hardware show` printed a 5,000-character
    name back whole, the studio a 200,000-character field: a trial)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    return text[:limit - 3] + "..."


def install_hint(extra: str) -> str:
    """How to install an optional extra, quoted for every shell: from the mosaic checkout
    (the name 'mosaic' on PyPI is another project)."""
    return f"pip install -e '.[{extra}]' in the mosaic checkout"


def missing_extra(extra: str, what: str = "this") -> MosaicInputError:
    """The one-line error for an optional extra that is not installed."""
    return MosaicInputError(f"{what} needs the {extra} extra: {install_hint(extra)}")


def require_extra(module: str, extra: str, what: str = "this") -> None:
    """Raise :func:`missing_extra` unless ``module`` (an optional extra's package) imports."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise missing_extra(extra, what) from None


class MosaicWarning(UserWarning):
    """Something the user should know that does not stop the command; the CLI prints its
    words alone (another library's warnings keep their category and source line)."""


class MosaicNote(MosaicWarning):
    """Context the user should have about the result (a release outside the encoded
    recipes, settings a plan leaves out); the CLI prints it as a ``note:`` line."""
