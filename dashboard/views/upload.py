"""Upload: per-rank trace files or a zip, a run name and tags -> a run in the catalog.

A bad file stops the upload with one line naming it (each bad file, when there
are several), and nothing is stored. When the dashboard has API tokens, an
upload needs one (its name is recorded as who pushed the run); without tokens,
uploads are open only on a dashboard that listens on this machine alone.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import streamlit as st

from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.ingest import limits
from overlapscope.dashboard import auth, context, data, uploads
from overlapscope.dashboard.server import is_loopback

DONE_KEY = "_upload_done"


def _access(settings) -> auth.Tokens | None:
    """The tokens an upload must present (none configured: ``auth.NONE``); None when uploads are off."""
    try:
        tokens = auth.current(settings.api_tokens)
    except UsageError as err:
        st.error(f"Uploads are off: {err}")
        return None
    address = st.get_option("server.address")
    if not tokens.configured and address and not is_loopback(address):
        st.info(f"Uploads are off: this dashboard listens on {address} without API tokens. Start it with "
                "`--api-tokens FILE` to let token holders upload.")
        return None
    return tokens


def _form(settings):
    files = st.file_uploader("Per-rank traces (.json, .json.gz), a manifest.json, or a .zip of them",
                             type=["json", "gz", "zip"], accept_multiple_files=True, key="upload_files",
                             help=f"One file per rank. Limit: {settings.max_upload_mb:,} MiB in all.")
    names = [f.name for f in files or []]
    name = st.text_input("Run name", value=uploads.default_run_name(names) if names else "", key="upload_name",
                         placeholder="e.g. llama-8b-fsdp-bs4")
    tags = st.text_input("Tags (optional)", key="upload_tags", placeholder="branch=main, gpus=8")
    go = st.button("Analyze and store", type="primary", disabled=not files, key="upload_go")
    return files, name.strip(), tags, go


def _store(settings, files, name: str, tags: dict, who: str | None) -> uploads.Outcome:
    with st.status(f"Storing {len(files)} file(s) as run {name!r}...", expanded=True) as status:
        bar = st.progress(0.0, text="Saving the uploads...")

        def progress(fraction: float, elapsed_s: float) -> None:
            text = "Parsing and storing" if fraction < 1 else "Stored"
            bar.progress(fraction, text=f"{text} · {elapsed_s:.1f} s")

        with tempfile.TemporaryDirectory(prefix="overlapscope-upload-") as tmp:
            outcome = uploads.store(functools.partial(data.ingest, settings.db, pushed_by=who,
                                                      limits=limits.for_uploads(settings.max_upload_bytes)), files, Path(tmp),
                                    name, tags, progress)
        if outcome.errors:
            status.update(label="Nothing was stored: fix the files below and upload again.", state="error")
        else:
            status.update(label=f"Stored run #{outcome.run_id} in {outcome.seconds:.1f} s.", state="complete",
                          expanded=False)
    return outcome


def render() -> None:
    ctx = context.current()
    settings = ctx.settings
    st.title("Upload a run")
    st.caption("Traces from `torch.profiler` (one file per rank, as `export_chrome_trace` or the tracer write "
               "them). The analysis runs on the server; the run is stored in the catalog for every page.")
    _done()
    tokens = _access(settings)
    if tokens is None:
        return
    token = st.text_input("API token", type="password", key="upload_token",
                          help="One of this dashboard's API tokens (as for overlapscope push); the run "
                               "records its name.") if tokens.configured else None
    files, name, tag_text, go = _form(settings)
    if not go:
        return
    who = tokens.who(token) if tokens.configured else None
    if tokens.configured and who is None:
        st.error("Give a valid API token to upload (ask whoever runs this dashboard for one).")
        return
    too_big = uploads.size_error(files, settings.max_upload_bytes)
    if too_big:
        st.error(too_big)
        return
    if not name:
        st.error("Give the run a name.")
        return
    try:
        tags = uploads.parse_tags(tag_text)
    except UsageError as err:
        st.error(str(err))
        return
    outcome = _store(settings, files, name, tags, who)
    for line in outcome.errors:
        st.error(line)
    if outcome.run_id is not None:
        # rerun so that the sidebar lists and selects the new run; the message survives in the session
        data.runs.clear()
        context.select_run(outcome.run_id)
        st.session_state[DONE_KEY] = f"Stored run #{outcome.run_id} ({name}) in {outcome.seconds:.1f} s. " \
                                     "It is now the selected run."
        st.rerun()


def _done() -> None:
    """The message of an upload that just finished (shown once, after the rerun)."""
    message = st.session_state.pop(DONE_KEY, None)
    if message:
        st.success(message)
        st.page_link("views/overview.py", label="Open its overview", icon=":material/monitoring:")
        st.page_link("views/checklist.py", label="Open its checklist", icon=":material/checklist:")


render()
