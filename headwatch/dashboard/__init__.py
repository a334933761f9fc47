"""The dashboard's shared pieces: settings, the page list, the cached loader, the view state and URL-bound widgets,
charts with their exports, what the pages compute (`pagedata`), the figure builders."""
