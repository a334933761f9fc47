"""The dashboard's shared pieces: the cached store loader and the figure builders."""
