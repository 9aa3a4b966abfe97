"""Checklist: the diagnosis of the run, failed findings first, each with its evidence and fix;
the rules that cannot judge the run folded under one line."""

from __future__ import annotations

import streamlit as st

from overlapscope.dashboard import context, data, shape
from overlapscope.dashboard.text import code, md


def _finding(f: dict) -> None:
    icon = shape.STATUS_ICON.get(f.get("status"), ":material/help:")
    with st.expander(md(f["title"]), expanded=f.get("status") == "fail", icon=icon):
        st.markdown(f"**Status:** {md(f.get('status'))} · **severity** {md(f.get('severity'))} · rule {md(f.get('id'))}")
        if f.get("evidence"):
            st.markdown(f"**Evidence.** {md(f['evidence'])}")
        if f.get("fix") and f.get("status") in ("fail", "warn"):
            st.markdown(f"**Fix.** {md(f['fix'])}")
        gain = f.get("predicted_gain_ms")
        if f.get("whatif") and gain is not None and f.get("status") in ("fail", "warn"):
            verb = f"saves **{gain:.2f} ms**" if gain >= 0 else f"costs **{-gain:.2f} ms**"
            st.markdown(f"**What if.** {code(f['whatif'])} {verb} per step (the slowest rank's median step), "
                        "predicted from this trace; the Model page's What if panel shows its terms.")
        elif f.get("no_change") and f.get("status") in ("fail", "warn"):
            st.markdown(f"**What if.** {md(f['no_change'])}.")


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    st.title(f"Checklist · {md(run['name'])}")
    if run.get("pruned_at"):  # the checklist as it ran at ingest: its evidence is in the findings
        st.caption(f"Run #{run['run_id']} was pruned on {str(run['pruned_at'])[:10]}: these are the findings "
                   "stored when it was ingested.")
        findings = shape.sorted_findings(data.findings(*ctx.key()))
    else:
        findings = shape.sorted_findings(data.diagnosis(*ctx.key())["findings"])
    if not findings:
        st.info("The checklist has no findings for this run.")
        return
    counts = shape.finding_counts(findings)
    cols = st.columns(4)
    for col, (status, label) in zip(cols, (("fail", ":red[failed]"), ("warn", ":orange[warnings]"),
                                           ("pass", ":green[passed]"), ("n/a", "not applicable"))):
        col.metric(label, counts.get(status, 0))
    applicable = [f for f in findings if f.get("status") != "n/a"]
    for f in applicable:
        _finding(f)
    # the rules that cannot judge this run (FSDP's on a DDP run, say): one line, folded, each with why
    idle = [f for f in findings if f.get("status") == "n/a"]
    if idle:
        with st.expander(f"Not applicable to this run ({len(idle)})", icon=shape.STATUS_ICON["n/a"]):
            st.markdown("\n".join(f"- **{md(f['title'])}** ({md(f.get('id'))}): {md(f.get('evidence') or 'n/a')}"
                                   for f in idle))


render()
