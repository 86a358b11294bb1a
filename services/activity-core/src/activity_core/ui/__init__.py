"""The ops UI's presentation: Jinja2 templates (autoescaped) and one stylesheet.

Routes live in http/routes_ui.py; this package only turns view models into HTML.
"""
