"""The web UI beyond app.py: shared handler helpers and the tabs and components that would not fit in it."""
