"""What every page shares: the settings, the catalog's runs and the run the sidebar selected.

``app.py`` builds the context once per script run (drawing the run picker in
the sidebar) and the page scripts read it with ``current()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from overlapscope.dashboard import data
from overlapscope.server.settings import Settings
from overlapscope.dashboard.text import md

CTX_KEY = "_overlapscope_ctx"
RUN_KEY = "run_id"  # the sidebar's run picker
NAME_FILTER_KEY = "runs_name_filter"
TAG_FILTER_KEY = "runs_tag_filter"
SELECT_KEY = "_select_run"  # a page asks for a run to be selected on the next rerun
UPLOAD_PAGE = "views/upload.py"


@dataclass(frozen=True)
class Context:
    settings: Settings
    runs: list[dict]
    """``catalog.runs``: newest first, with headline metrics (all of them, whatever the filter)."""
    run: dict | None
    """The selected run (a ``catalog.runs`` row), None on an empty catalog."""
    shown: list[dict] = ()
    """The runs the sidebar's name and tag filter lets through (History draws these)."""

    @property
    def db(self) -> str:
        return self.settings.db

    def key(self, run: dict | None = None) -> tuple[str, int, str]:
        """(catalog, run id, stamp): the arguments of every cached analysis."""
        run = run or self.run
        return self.db, run["run_id"], data.stamp(run)


def run_label(run: dict) -> str:
    created = str(run.get("created_at") or "")[:16]
    pruned = " · pruned" if run.get("pruned_at") else ""
    return f"{run['name']} · #{run['run_id']} · {run['ranks']} ranks · {created}{pruned}"


def tag_options(runs: list[dict]) -> list[str]:
    """Every ``key=value`` tag of the runs, sorted."""
    return sorted({f"{k}={v}" for r in runs for k, v in (r.get("tags") or {}).items()})


def filtered(runs: list[dict], names: list[str], tags: list[str]) -> list[dict]:
    """The runs of any of ``names`` (all when empty) carrying every tag of ``tags``."""
    wanted = [t.partition("=") for t in tags]
    return [r for r in runs if (not names or r["name"] in names)
            and all((r.get("tags") or {}).get(k) == v for k, _, v in wanted)]


def _filters(runs: list[dict]) -> list[dict]:
    """The name and tag filters of the run picker; the runs they let through."""
    names = sorted({r["name"] for r in runs})
    for key, options in ((NAME_FILTER_KEY, names), (TAG_FILTER_KEY, tag_options(runs))):
        if key in st.session_state:  # a run or tag that is gone is no longer offered
            st.session_state[key] = [v for v in st.session_state[key] if v in options]
    with st.expander("Filter runs", expanded=bool(st.session_state.get(NAME_FILTER_KEY)
                                                   or st.session_state.get(TAG_FILTER_KEY))):
        chosen_names = st.multiselect("Name", names, key=NAME_FILTER_KEY, placeholder="every name")
        chosen_tags = st.multiselect("Tags", tag_options(runs), key=TAG_FILTER_KEY, placeholder="any tags")
    return filtered(runs, chosen_names, chosen_tags)


def build(settings: Settings) -> Context:
    """Read the runs and draw the run picker (with its name and tag filters) in the sidebar."""
    runs = data.runs(settings.db)
    by_id = {r["run_id"]: r for r in runs}
    requested = st.session_state.pop(SELECT_KEY, None)
    if requested is not None:
        st.session_state[RUN_KEY] = requested
        passing = filtered(runs, st.session_state.get(NAME_FILTER_KEY) or [],
                           st.session_state.get(TAG_FILTER_KEY) or [])
        if requested not in {r["run_id"] for r in passing}:  # a page opened a run the filter hides
            st.session_state[NAME_FILTER_KEY], st.session_state[TAG_FILTER_KEY] = [], []
    with st.sidebar:
        shown = _filters(runs) if runs else []
        options = [r["run_id"] for r in shown]
        selected = st.session_state.get(RUN_KEY)
        if selected not in by_id or (selected not in options and options and requested is None):
            st.session_state[RUN_KEY] = (shown or runs)[0]["run_id"] if runs else None
        if runs and st.session_state[RUN_KEY] not in options:  # a run a page asked for stays pickable
            options.insert(0, st.session_state[RUN_KEY])
        if runs:
            st.selectbox("Run", options=options, key=RUN_KEY, format_func=lambda i: run_label(by_id[i]))
            if len(shown) < len(runs):
                st.caption(f"{len(shown)} of {len(runs)} runs match the filter.")
        else:
            st.caption("No runs in the catalog yet.")
    ctx = Context(settings, runs, by_id.get(st.session_state[RUN_KEY]), shown)
    st.session_state[CTX_KEY] = ctx
    return ctx


def current() -> Context:
    return st.session_state[CTX_KEY]


def select_run(run_id: int) -> None:
    """Make ``run_id`` the selected run from the next rerun on."""
    st.session_state[SELECT_KEY] = run_id


def require_events(run: dict, what: str) -> None:
    """Stop a page that reads raw events when its run was pruned, saying what remains."""
    if run.get("pruned_at"):
        st.info(f"Run #{run['run_id']} ({md(run['name'])}) was pruned on {str(run['pruned_at'])[:10]}: its raw events "
                f"are gone, so {what} cannot be drawn. Its headline, per-rank and per-step figures and findings "
                "remain (Overview, Checklist, History, Compare).", icon=":material/inventory_2:")
        st.stop()


def require_analyses(ctx: Context, what: str) -> None:
    """Stop a page that needs the run's stored analyses when it has none (pruned before
    the run store kept them), saying what remains."""
    run = ctx.run
    if not data.has_analyses(*ctx.key()):
        st.info(f"Run #{run['run_id']} ({md(run['name'])}) was pruned on {str(run['pruned_at'])[:10]}, before "
                f"overlapscope kept its analyses: {what} cannot be drawn. Its headline, per-rank and per-step "
                "figures and findings remain (Overview, Checklist, History, Compare).", icon=":material/inventory_2:")
        st.stop()


def require_run(ctx: Context) -> dict:
    """The selected run; on an empty catalog, say how to add one and stop the page."""
    if ctx.run is None:
        from overlapscope.dashboard.samples import PROGRESS

        if PROGRESS.running:  # the server started before the samples were in: look again in a moment
            st.info(f"Loading the sample runs ({PROGRESS.done} of {PROGRESS.total} stored): the first one "
                    "appears here in a few seconds.")
            import time

            time.sleep(2.0)
            st.rerun()
        st.info("The catalog holds no runs yet. Upload per-rank traces (or a .zip of them) to analyze a run.")
        st.page_link(UPLOAD_PAGE, label="Upload traces", icon="⬆️")
        st.stop()
    return ctx.run
