"""The dashboard's shared pieces: settings, the page list, the cached loader, the URL-bound widgets, the figure builders."""
