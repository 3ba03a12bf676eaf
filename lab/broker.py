"""The embedded broker: kombu's filesystem transport, with messages written atomically.

kombu's own ``_put`` creates ``<time>_<uuid>.<queue>.msg`` and then writes into it, while a
worker's ``_get`` may move and read that file in between: it reads an empty message and the
worker dies on ``JSONDecodeError`` (seen in CI). Here a message is written under a name no
queue matches (``.part`` appended) and renamed into place, which is atomic on one file system.
Selected with the broker URL ``labfs://localhost//`` (``lab.settings``: when ``REDIS_URL`` is
unset; the host is not used, but without one kombu warns at every connection).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # ignored by _get: its name ends in neither queue's .msg
        try:
            with open(partial, "wb", buffering=0) as f:
                f.write(str_to_bytes(dumps(payload)))
            os.rename(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES["labfs"] = "lab.broker:Transport"
