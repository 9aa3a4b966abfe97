"""overlapscope analyzer: load Kineto traces into DuckDB and measure exposed communication."""

__version__ = "0.1.0"
