"""Upload: per-rank trace files or a zip, a run name and tags -> a run in the catalog.

A bad file stops the upload with one line naming it (each bad file, when there
are several), and nothing is stored. When the dashboard has API tokens, an
upload needs one (its name is recorded as who pushed the run); without tokens,
uploads are open only on a dashboard that listens on this machine alone.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import traceback
from pathlib import Path

import streamlit as st

from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.ingest import limits, memory
from overlapscope.dashboard import context, data
from overlapscope.dashboard.text import md
from overlapscope.server import audit, auth, spool, uploads
from overlapscope.server.asgi import is_loopback

DONE_KEY = "_upload_done"
REFUSED_KEY = "_upload_refused"
ROUND_KEY = "_upload_round"  # a new file uploader (empty) after each stored or refused upload


def _session_id() -> str | None:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx else None


def _uploader_key() -> str:
    n = st.session_state.get(ROUND_KEY, 0)
    return "upload_files" if n == 0 else f"upload_files_{n}"


def _forget(files) -> None:
    """Drop the uploads from the server (disk and Streamlit's records) and empty the uploader."""
    session_id = _session_id()
    if session_id:
        spool.release(session_id, [f.file_id for f in files])
    st.session_state[ROUND_KEY] = st.session_state.get(ROUND_KEY, 0) + 1


def _access(settings) -> auth.Tokens | None:
    """The tokens an upload must present (none configured: ``auth.NONE``); None when uploads are off."""
    try:
        tokens = auth.current(settings.api_tokens)
    except UsageError as err:
        print(f"overlapscope: the API token file cannot be read: {err}", file=sys.stderr, flush=True)
        st.error("Uploads are off: this server's token file cannot be read (its log says why).")
        return None
    address = st.get_option("server.address")
    if not tokens.configured and address and not is_loopback(address):
        st.info(f"Uploads are off: this dashboard listens on {address} without API tokens. Start it with "
                "`--api-tokens FILE` to let token holders upload.")
        return None
    return tokens


# Streamlit's uploader prints its own limit ("200MB per file"); the limit enforced here is on all the
# files together, so that line is hidden and the real one said beneath (a constant style, no user text)
_HIDE_WIDGET_LIMIT = ("<style>[data-testid='stFileUploaderDropzoneInstructions'] small "
                      "{display: none;}</style>")


def _propose_name(names: list[str]) -> None:
    """Put a run name made from the files (their folder, the zip's name, or the traces' common
    stem) in the name box when the files change, unless the user typed one of their own."""
    state = st.session_state
    proposal = uploads.default_run_name(names) if names else ""
    before = state.get("upload_proposed")
    if tuple(names) != state.get("upload_proposed_for"):
        if not state.get("upload_name") or state.get("upload_name") == before:
            state["upload_name"] = proposal
        state["upload_proposed"], state["upload_proposed_for"] = proposal, tuple(names)


def _form(settings):
    st.html(_HIDE_WIDGET_LIMIT)
    files = st.file_uploader("Per-rank traces (.json, .json.gz), a manifest.json, or a .zip of them",
                             type=["json", "gz", "zip"], accept_multiple_files=True,
                             key=_uploader_key(),
                             help=f"One file per rank. Limit: {settings.max_upload_mb:,} MiB for all the files "
                                  "together.")
    st.caption(f"Limit: {settings.max_upload_mb:,} MiB for all the files together.")
    names = [f.name for f in files or []]
    _propose_name(names)
    name = st.text_input("Run name", key="upload_name", placeholder="e.g. llama-8b-fsdp-bs4")
    tags = st.text_input("Tags (optional)", key="upload_tags", placeholder="branch=main, gpus=8")
    go = st.button("Analyze and store", type="primary", disabled=not files, key="upload_go")
    return files, name.strip(), tags, go


def _store(settings, files, name: str, tags: dict, who: str | None) -> uploads.Outcome:
    with st.status(f"Storing {len(files)} file(s) as run {md(name)}...", expanded=True) as status:
        bar = st.progress(0.0, text="Saving the uploads...")

        def progress(fraction: float, elapsed_s: float) -> None:
            text = "Parsing and storing" if fraction < 1 else "Stored"
            bar.progress(fraction, text=f"{text} · {elapsed_s:.1f} s")

        caps = limits.for_uploads(settings.max_upload_bytes)  # for every read of the uploads
        try:
            with tempdirs.folder("upload") as tmp:
                ingest = functools.partial(data.ingest, settings.db, pushed_by=who, limits=caps, shown_from=tmp)
                outcome = uploads.store(ingest, files, Path(tmp), name, tags, progress, session_id=_session_id(),
                                        limits=caps)
        except UsageError as err:  # the catalog busy or unwritable: one line that says so
            outcome = uploads.Outcome(errors=[str(err)])
        except Exception as err:  # a bug, not the input: one line here, the traceback in the server's log
            print(f"overlapscope: an upload of {name!r} failed:\n{traceback.format_exc()}", file=sys.stderr,
                  flush=True)
            outcome = uploads.Outcome(errors=[f"internal error ({type(err).__name__}) while storing the run: "
                                              "nothing was stored; the server's log has the details"])
        memory.release_freed()  # what the upload's buffers left (the decode ran in a child: runs/apart.py)
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
    who = tokens.who(token) if tokens.configured else None
    if tokens.configured and who is None:  # no file chooser, and the server takes no file, before a token
        message = "Give a valid API token to upload (ask whoever runs this dashboard for one)."
        st.error(message) if token else st.info(message)
        if token:
            _audit_refused_token(token)
        return
    if tokens.configured:
        spool.grant(_session_id())
    files, name, tag_text, go = _form(settings)
    if not go:
        return
    too_big = uploads.size_error(files, settings.max_upload_bytes, _session_id())
    if too_big:
        _audit("refuse", by=who, name=name or None, reason=too_big)
        _refused(files, [too_big])
    if not name:
        st.error("Give the run a name.")
        return
    try:
        name, tags = uploads.check_form(name, tag_text)
    except UsageError as err:
        st.error(md(err))
        return
    outcome = _store(settings, files, name, tags, who)
    if outcome.errors:
        _audit("refuse", by=who, name=name, reason=outcome.errors[0])
        _refused(files, outcome.errors)
    _forget(files)  # stored: the server keeps no copy of the uploads
    if outcome.run_id is not None:
        _audit("store", by=who, run_id=outcome.run_id, name=name, seconds=round(outcome.seconds, 2))
        # rerun so that the sidebar lists and selects the new run; the message survives in the session
        data.runs.clear()
        context.select_run(outcome.run_id)
        st.session_state[DONE_KEY] = f"Stored run #{outcome.run_id} ({md(name)}) in {outcome.seconds:.1f} s. " \
                                     "It is now the selected run."
        st.rerun()


def _audit(action: str, **fields) -> None:
    """The server's audit line for what this visitor did (server/audit.py)."""
    audit.record(action, "page", getattr(st.context, "ip_address", None), **fields)


def _audit_refused_token(token: str) -> None:
    """One audit line per wrong token a visitor gives (the page reruns on every click: not one
    per rerun); the session keeps a digest of it, never the token."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    if st.session_state.get("upload_refused_token") != digest:
        st.session_state["upload_refused_token"] = digest
        _audit("refuse", status=401, reason="not one of this dashboard's API tokens")


def _refused(files, errors: list[str]) -> None:
    """Nothing was stored: forget the uploads (upload again after a fix) and show why, after
    a rerun that empties the uploader (so the next files chosen are not lost to it)."""
    _forget(files)
    st.session_state[REFUSED_KEY] = errors
    st.rerun()


def _done() -> None:
    """The message of an upload that just finished or was refused (shown once, after the rerun)."""
    for line in st.session_state.pop(REFUSED_KEY, None) or []:
        st.error(md(line))
    message = st.session_state.pop(DONE_KEY, None)
    if message:
        st.success(message)
        st.page_link("views/overview.py", label="Open its overview", icon=":material/monitoring:")
        st.page_link("views/checklist.py", label="Open its checklist", icon=":material/checklist:")


render()
