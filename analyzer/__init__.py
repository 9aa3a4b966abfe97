"""overlapscope analyzer: load Kineto traces into DuckDB and measure exposed communication."""

__version__ = "0.1.0"


def version() -> str:
    """The installed overlapscope's version (this checkout's when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("overlapscope")
    except PackageNotFoundError:
        return __version__
