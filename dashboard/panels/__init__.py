"""The pages' panels: per page (same module name as its file in ``pages/``), its widgets grouped into frozen records
and one function per panel, so that the page's ``main()`` reads as its layout. Panels draw with streamlit and the
figure builders; what they say is computed in `analysis.findings`.
"""
