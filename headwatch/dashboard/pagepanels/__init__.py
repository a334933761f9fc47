"""What a page draws, for the pages whose layout would otherwise not fit in their ``main()``: per page, a module named
like its file in ``pages/`` holding its widgets grouped into frozen records and one function per panel, so that the
page's ``main()`` reads as its layout. These modules draw with streamlit and the figure builders; what they say is
computed in `analysis.findings`.
"""
