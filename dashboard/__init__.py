"""The Streamlit dashboard: upload, overview, timeline, buckets and units, model,
checklist and compare pages over the catalog.

``app.py`` is the entry (``overlapscope dashboard`` runs it); ``views/`` holds one
script per page; ``charts.py`` builds Altair charts from plain rows (pure);
``shape.py`` turns analysis results into those rows (pure); ``data.py`` is the
only place that opens the catalog, and it only calls analyzer functions.
"""
