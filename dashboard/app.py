"""The dashboard's entry: ``overlapscope dashboard`` serves this script (``server.py``).

It prepares the catalog (the sample runs go into an empty one), draws the run
picker and the page menu, and runs the chosen page from ``views/``.
"""

from __future__ import annotations

import streamlit as st

from overlapscope.analyzer.errors import CatalogBusy
from overlapscope.dashboard import context, data
from overlapscope.server.settings import from_env

PAGES = {
    "Run": [
        ("views/overview.py", "Overview", ":material/monitoring:"),
        ("views/timeline.py", "Timeline", ":material/view_timeline:"),
        ("views/buckets.py", "Buckets & units", ":material/stacked_bar_chart:"),
        ("views/model.py", "Model", ":material/function:"),
        ("views/checklist.py", "Checklist", ":material/checklist:"),
    ],
    "Catalog": [
        ("views/history.py", "History", ":material/timeline:"),
        ("views/compare.py", "Compare", ":material/compare_arrows:"),
        ("views/upload.py", "Upload", ":material/upload:"),
    ],
}


@st.cache_resource(show_spinner="Preparing the catalog (loading the sample runs)...")
def _prepared(db: str, load_samples: bool, samples_dir: str) -> list[int]:
    """Once per catalog and process: create it, load the samples into an empty one."""
    return data.prepare_catalog(db, load_samples, samples_dir)


def main() -> None:
    st.set_page_config(page_title="overlapscope", page_icon=":material/sync_alt:", layout="wide")
    settings = from_env()
    nav = st.navigation({section: [st.Page(path, title=title, icon=icon, default=(path == PAGES["Run"][0][0]))
                                   for path, title, icon in pages] for section, pages in PAGES.items()})
    try:
        _prepared(settings.db, settings.load_samples, str(settings.samples_dir))
        context.build(settings)
        nav.run()
    except CatalogBusy:  # its message names the file: a server path, not for visitors
        st.warning("The catalog is in use by another process (an ingest or a prune on the server). "
                   "Retry in a moment.")
        st.button("Retry")


# Streamlit runs this file as __main__; a process spawned from the same interpreter
# (multiprocessing's spawn) imports it as __mp_main__ and must not start a page.
if __name__ == "__main__":
    main()
