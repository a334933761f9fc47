"""The dashboard: one folder per view (`views`, each a page's layout, its data and its figures), and what the views
share: settings, the page list (`navigation`), the stores offered and opened (`loader`), the one cache for what a view
derives from a store (`cache`) and the caches several views read (`derived`), the view state and URL-bound widgets,
charts with their exports, the figures several views draw (`figures`), labels and styles, the server (`serve`)."""
