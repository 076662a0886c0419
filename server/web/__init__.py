"""The browser app: its static files and the routes that serve them (:mod:`.routes`)."""

from .routes import web_blueprint

__all__ = ["web_blueprint"]
