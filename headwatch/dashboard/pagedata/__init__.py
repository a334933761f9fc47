"""What a page computes from a store before it draws, one module per page that needs it: pure, no streamlit.

A page's ``main()`` lays out its panels; the slices, clusters and tables the panels show are made here, from
the store and the page's choices, so they can be tested without Streamlit.
"""
