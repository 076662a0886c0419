"""The browser app: its static files and the routes that serve them (:mod:`.routes`)."""

from .api_description import WEB_OPERATIONS
from .routes import web_blueprint

__all__ = ["WEB_OPERATIONS", "web_blueprint"]
