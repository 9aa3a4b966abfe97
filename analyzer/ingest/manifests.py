"""A manifest.json read as the contract says (``contract.manifest``), or one line naming it."""

from __future__ import annotations

from overlapscope.analyzer.errors import InputError
from overlapscope.contract import manifest as contract
from overlapscope.contract.manifest import Manifest


def parse_manifest(data: bytes, where: str) -> tuple[Manifest, str]:
    """The manifest (the contract's struct) and its text; a bad one is one line naming the file."""
    try:
        return contract.decode(data), data.decode()
    except RecursionError:
        raise InputError(where, "manifest is nested deeper than any manifest") from None
    except contract.ManifestError as err:
        raise InputError(where, str(err)) from None
    except UnicodeDecodeError:
        raise InputError(where, "manifest is not UTF-8 text") from None
