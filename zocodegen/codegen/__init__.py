"""Code generator: IR + memory plan -> a firmware project rendered from Jinja2 templates
(project.py); layers/ turns one op into kernel calls and constants."""
