"""The Timeline's in-context-learning panel: the run's two ICL scores over training with the stages the Timeline
shades (its basis radio), each score's sharpest fall and the induction boundary marked (`dashboard.icl`, which the
Forward lenses share)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from headwatch.analysis.findings.events import basis_text
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.icl import icl_panel


def timeline_icl_panel(frame: RunFrame, stages: pd.DataFrame | None, basis: str | None) -> None:
    """The ICL scores on the Timeline's time axis, the stages of the basis chosen above (``basis``) shaded."""
    st.subheader("In-context learning over training")
    icl_panel(frame, stages, key="timeline_icl", shaded=f"read from: {basis_text(basis)}" if basis else "")
