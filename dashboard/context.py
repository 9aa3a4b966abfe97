"""What every page shares: the settings, the catalog's runs and the run the sidebar selected.

``app.py`` builds the context once per script run (drawing the run picker in
the sidebar) and the page scripts read it with ``current()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from overlapscope.dashboard import data
from overlapscope.dashboard.settings import Settings

CTX_KEY = "_overlapscope_ctx"
RUN_KEY = "run_id"  # the sidebar's run picker
SELECT_KEY = "_select_run"  # a page asks for a run to be selected on the next rerun
UPLOAD_PAGE = "views/upload.py"


@dataclass(frozen=True)
class Context:
    settings: Settings
    runs: list[dict]
    """``catalog.runs``: newest first, with headline metrics."""
    run: dict | None
    """The selected run (a ``catalog.runs`` row), None on an empty catalog."""

    @property
    def db(self) -> str:
        return self.settings.db

    def key(self, run: dict | None = None) -> tuple[str, int, str]:
        """(catalog, run id, stamp): the arguments of every cached analysis."""
        run = run or self.run
        return self.db, run["run_id"], data.stamp(run)


def run_label(run: dict) -> str:
    created = str(run.get("created_at") or "")[:16]
    return f"{run['name']} · #{run['run_id']} · {run['ranks']} ranks · {created}"


def build(settings: Settings) -> Context:
    """Read the runs and draw the run picker in the sidebar."""
    runs = data.runs(settings.db)
    by_id = {r["run_id"]: r for r in runs}
    if SELECT_KEY in st.session_state:
        st.session_state[RUN_KEY] = st.session_state.pop(SELECT_KEY)
    if st.session_state.get(RUN_KEY) not in by_id:
        st.session_state[RUN_KEY] = runs[0]["run_id"] if runs else None
    with st.sidebar:
        if runs:
            st.selectbox("Run", options=list(by_id), key=RUN_KEY, format_func=lambda i: run_label(by_id[i]))
        else:
            st.caption("No runs in the catalog yet.")
        st.caption(f"Catalog: `{settings.db}`")
    ctx = Context(settings, runs, by_id.get(st.session_state[RUN_KEY]))
    st.session_state[CTX_KEY] = ctx
    return ctx


def current() -> Context:
    return st.session_state[CTX_KEY]


def select_run(run_id: int) -> None:
    """Make ``run_id`` the selected run from the next rerun on."""
    st.session_state[SELECT_KEY] = run_id


def require_run(ctx: Context) -> dict:
    """The selected run; on an empty catalog, say how to add one and stop the page."""
    if ctx.run is None:
        st.info("The catalog holds no runs yet. Upload per-rank traces (or a .zip of them) to analyze a run.")
        st.page_link(UPLOAD_PAGE, label="Upload traces", icon="⬆️")
        st.stop()
    return ctx.run
