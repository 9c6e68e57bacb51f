"""download(): verified, atomic, resumable-by-retry downloads that never leave a partial file."""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from zoo.datamodules.download import ChecksumError, DownloadError, download, sha1_of

CONTENT = b"Go.\tVa !\nHi.\tSalut !\n" * 100


@pytest.fixture
def source(tmp_path: Path) -> Path:
    file = tmp_path / "src" / "fra.txt"
    file.parent.mkdir()
    file.write_bytes(CONTENT)
    return file


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_sha1_of(source: Path) -> None:
    assert sha1_of(source) == hashlib.sha1(CONTENT).hexdigest()


def test_download_file_url_with_right_checksums(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "cache" / "fra.txt"
    result = download(
        source.as_uri(),
        destination,
        sha1=hashlib.sha1(CONTENT).hexdigest(),
        sha256=hashlib.sha256(CONTENT).hexdigest(),
    )
    assert result == destination
    assert destination.read_bytes() == CONTENT
    assert _leftovers(destination.parent) == ["fra.txt"]


def test_wrong_checksum_raises_and_leaves_nothing(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "cache" / "fra.txt"
    with pytest.raises(ChecksumError) as info:
        download(source.as_uri(), destination, sha1="0" * 40)
    message = str(info.value)
    assert source.as_uri() in message and "0" * 40 in message and hashlib.sha1(CONTENT).hexdigest() in message
    assert "--data.path" in message and "Delete" in message
    assert isinstance(info.value, ValueError)
    assert _leftovers(destination.parent) == []


def test_existing_good_file_is_not_downloaded_again(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = tmp_path / "fra.txt"
    destination.write_bytes(CONTENT)

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("download() opened the URL although the file was already there")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert download("http://example.invalid/fra.txt", destination, sha1=sha1_of(source)) == destination


def test_existing_bad_file_is_replaced(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "fra.txt"
    destination.write_bytes(b"half a fi")
    download(source.as_uri(), destination, sha1=sha1_of(source))
    assert destination.read_bytes() == CONTENT


class _TruncatingHandler(http.server.BaseHTTPRequestHandler):
    """Announces 1,000,000 bytes, sends a few, and hangs up."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.wfile.write(b"only a little")
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def truncating_server() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _TruncatingHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/fra-eng.zip"
    finally:
        server.shutdown()
        server.server_close()


def test_interrupted_transfer_raises_and_leaves_nothing(truncating_server: str, tmp_path: Path) -> None:
    destination = tmp_path / "fra-eng.zip"
    with pytest.raises(DownloadError, match="interrupted|stopped"):
        download(truncating_server, destination, timeout=10)
    assert _leftovers(tmp_path) == []


def test_keyboard_interrupt_removes_the_temporary_file(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = urllib.request.urlopen(source.as_uri())

    def interrupted_read(size: int = -1) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(opened, "read", interrupted_read)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: opened)
    destination = tmp_path / "cache" / "fra.txt"
    with pytest.raises(KeyboardInterrupt):
        download(source.as_uri(), destination, sha1=sha1_of(source))
    assert _leftovers(destination.parent) == []


def test_unreachable_host_says_to_pass_a_local_file(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DownloadError, match=r"Could not reach .*--data\.path"):
        download(f"http://127.0.0.1:{port}/fra-eng.zip", tmp_path / "fra-eng.zip", timeout=5)
    assert _leftovers(tmp_path) == []
