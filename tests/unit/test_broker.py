"""The embedded broker (``lab.broker``): a message being written is never handed out."""

from __future__ import annotations

from kombu import Connection


def test_messages_appear_whole_and_partial_files_are_ignored(tmp_path):
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
               "control_folder": str(tmp_path / "control"),
               "processed_folder": str(tmp_path / "processed"),
               "store_processed": False}  # fmt: skip
    with Connection("labfs://", transport_options=options) as conn:
        queue = conn.SimpleQueue("host.a")
        (folder / "1_x.host.a.msg.part").write_text("")  # a writer that has not finished
        queue.put({"n": 1})
        assert [p.name for p in folder.iterdir() if not p.name.endswith(".part")] != []
        assert queue.get(timeout=2).payload == {"n": 1}
        assert [p.name for p in folder.iterdir()] == ["1_x.host.a.msg.part"]
        queue.close()


def test_the_embedded_broker_connects_without_kombu_s_hostname_warning(tmp_path, caplog):
    """`make run` printed kombu's "No hostname was supplied" at every worker start: the URL
    had no host (the filesystem transport uses none)."""
    import logging

    import pytest
    from django.conf import settings

    if not settings.CELERY_BROKER_URL.startswith("labfs:"):
        pytest.skip("REDIS_URL is set: the broker is Redis")
    options = {key: str(tmp_path / key) for key in ("data_folder_in", "data_folder_out")}
    (tmp_path / "data_folder_in").mkdir()
    url = settings.CELERY_BROKER_URL
    with (
        caplog.at_level(logging.WARNING, logger="kombu"),
        Connection(url, transport_options=options) as conn,
    ):
        conn.connect()
        conn.info()
    assert not [r for r in caplog.records if "hostname" in r.getMessage()], caplog.text
