"""The HTTP side of ``overlapscope dashboard``: one process serves the Streamlit pages
(``dashboard/``) and the HTTP API beside them (``asgi.py``), the API's routes
(``api.py``: those of ``contract/api.py``, under ``/api/v1``), its tokens (``auth.py``),
uploads spooled to disk under a cap (``spool.py``) and stored as runs (``uploads.py``),
and the server's settings (``settings.py``). It calls the library (``analyzer/``).
"""
