"""The dashboard's entry: ``overlapscope dashboard`` runs ``streamlit run`` on this file.

It prepares the catalog (the sample runs go into an empty one), draws the run
picker and the page menu, and runs the chosen page from ``views/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run dashboard/app.py` from a checkout that is not pip-installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import streamlit as st  # noqa: E402

from dashboard import context, data  # noqa: E402
from dashboard.settings import from_env  # noqa: E402

PAGES = {
    "Run": [
        ("views/overview.py", "Overview", ":material/monitoring:"),
        ("views/timeline.py", "Timeline", ":material/view_timeline:"),
        ("views/buckets.py", "Buckets & units", ":material/stacked_bar_chart:"),
        ("views/model.py", "Model", ":material/function:"),
        ("views/checklist.py", "Checklist", ":material/checklist:"),
    ],
    "Catalog": [
        ("views/upload.py", "Upload", ":material/upload:"),
        ("views/compare.py", "Compare", ":material/compare_arrows:"),
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
    except data.CatalogBusy as err:
        st.warning(f"{err}")
        st.button("Retry")


main()
