"""The wheel's layout. pyproject.toml holds the metadata; this file only maps the checkout's top-level
templates/, static/ and alembic/ into the package (app/templates, app/static, app/alembic), where
app.config.resource_dir finds them once installed. In a checkout (or an editable install) they stay where
they are and the same function finds them there."""

from setuptools import find_packages, setup

BUNDLED = {"app.templates": "templates", "app.static": "static", "app.alembic": "alembic"}

setup(
    packages=find_packages(include=["app", "app.*", "runners", "runners.*"]) + list(BUNDLED),
    package_dir=BUNDLED,
    package_data={
        "app": ["demo/*.yaml"],
        "app.templates": ["*.html", "**/*.html"],
        "app.static": ["*.css", "*.js", "*.svg", "vendor/*"],
        "app.alembic": ["script.py.mako", "versions/*.py"],
    },
    include_package_data=False,
)
