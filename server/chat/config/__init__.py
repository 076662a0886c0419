"""The chat backend's settings: :class:`ChatSettings` (:mod:`.settings`) and the public
URL sandboxes call back on (:mod:`.public_url`). Bad values raise
:class:`~sandstream.server.chat.model.ChatConfigError` on construction.
"""

from .public_url import CALLBACKS_SERVICE, probe_public_url
from .settings import ChatSettings

__all__ = [
    "CALLBACKS_SERVICE",
    "ChatSettings",
    "probe_public_url",
]
