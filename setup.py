"""Build the optional C scanner (analyzer/ingest/_kineto_scan.c); everything else is in pyproject.toml.

optional=True: where no compiler is found, the install goes on and the analyzer
decodes with msgspec alone (slower, the same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("overlapscope.analyzer.ingest._kineto_scan", ["analyzer/ingest/_kineto_scan.c"],
                             extra_compile_args=["-O3"], optional=True)])
