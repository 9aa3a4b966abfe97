"""One error type for bad input: it names the file and the problem in one line."""


class InputError(Exception):
    """A trace, archive or manifest that cannot be used.

    ``str(err)`` is the one line the CLI prints: ``<file>: <problem>``.
    """

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self):  # rebuilt from both fields when it crosses a process boundary
        return (type(self), (self.path, self.problem))


class UsageError(Exception):
    """Bad command-line arguments or options that the library cannot act on."""


class CatalogBusy(UsageError):
    """The catalog file is locked by another process (DuckDB allows one writer)."""


class CatalogWriteError(UsageError):
    """The catalog's file cannot take the run (a full or read-only disk): nothing was stored."""


class RunNotFound(UsageError):
    """No run of that id or name in the catalog."""
