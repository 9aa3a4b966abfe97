"""The Streamlit dashboard: upload, overview, timeline, buckets and units, model,
checklist, history and compare pages over the catalog.

``app.py`` is the entry (``overlapscope dashboard`` serves it, with the HTTP API
beside it: ``server/``); ``views/`` holds one script per page; ``charts.py``
builds Altair charts from plain rows (pure); ``shape.py`` turns analysis results
into those rows (pure); ``data.py`` is the pages' door to the catalog (reads
through this process's shared access, writes through its single writer); the
sample runs load in the background (``samples.py``). Settings, tokens and
uploads are the server's (``server/settings.py``, ``auth.py``, ``uploads.py``).
"""
