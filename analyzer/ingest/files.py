"""Where trace files are: local paths, or URIs of any file system pyarrow reads
(``s3://``, ``gs://``, ``hdfs://``, ``file://``: ``pyarrow.fs``), so that the worker
of a rank (a local process or a Ray task on another machine) reads its trace where
it lies. Only names travel to the workers, never the bytes.
"""

from __future__ import annotations

import os
import posixpath


def is_uri(path: str) -> bool:
    return "://" in path


def _fs(uri: str):
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as err:  # an unknown scheme, no credentials, no such bucket: the input's problem
        from overlapscope.analyzer.errors import InputError

        raise InputError(uri, f"cannot open this file system: {str(err).splitlines()[0]}") from None


def _info(path: str):
    filesystem, inner = _fs(path)
    return filesystem.get_file_info(inner)


def exists(path: str) -> bool:
    if not is_uri(path):
        return os.path.exists(path)
    from pyarrow import fs

    return _info(path).type != fs.FileType.NotFound


def isdir(path: str) -> bool:
    if not is_uri(path):
        return os.path.isdir(path)
    from pyarrow import fs

    return _info(path).type == fs.FileType.Directory


def isfile(path: str) -> bool:
    if not is_uri(path):
        return os.path.isfile(path)
    from pyarrow import fs

    return _info(path).type == fs.FileType.File


def size(path: str) -> int:
    return os.path.getsize(path) if not is_uri(path) else _info(path).size


def listdir(path: str) -> list[str]:
    """The names (not paths) in a folder."""
    if not is_uri(path):
        return os.listdir(path)
    from pyarrow import fs

    filesystem, inner = _fs(path)
    return [posixpath.basename(i.path) for i in filesystem.get_file_info(fs.FileSelector(inner, recursive=False))]


def join(folder: str, name: str) -> str:
    return os.path.join(folder, name) if not is_uri(folder) else folder.rstrip("/") + "/" + name


def basename(path: str) -> str:
    return os.path.basename(path) if not is_uri(path) else posixpath.basename(path.rstrip("/"))


def realpath(path: str) -> str:
    """What tells two names of one file apart (a URI names itself)."""
    return os.path.realpath(path) if not is_uri(path) else path


def open_binary(path: str):
    """A readable, seekable binary file (a zip archive needs seeking)."""
    if not is_uri(path):
        return open(path, "rb")
    filesystem, inner = _fs(path)
    return filesystem.open_input_file(inner)
