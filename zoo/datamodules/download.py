"""Download a file once, verify it, and never leave half of it behind.

:func:`download` streams a URL (``http://``, ``https://`` or ``file://``) into a temporary file
beside the destination, hashes it on the way, checks the digest and only then renames it into
place with :func:`os.replace`. The rename is atomic on one file system, so a reader (another
process of a multi-GPU run, or the next run after a crash or Ctrl-C) sees either no file or the
whole verified file, never a partial one. A destination that already holds a file with the
expected digest is reused without touching the network.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from zoo.errors import DataError, ZooError

__all__ = ["ChecksumError", "DownloadError", "download", "sha1_of"]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


def _local_fix(local_copy: str) -> str:
    """The fix every failure message ends with: a local copy, passed with ``--data.path``."""
    return f"download the file by other means and pass it with --data.path {local_copy}"


class DownloadError(ZooError, OSError):
    """The file could not be fetched: no network, a bad URL, or an interrupted transfer."""


class ChecksumError(DataError):
    """The fetched bytes do not have the expected digest."""


def _digest(path: Path, algorithm: str) -> str:
    hasher = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def sha1_of(path: str | os.PathLike[str]) -> str:
    """The SHA-1 hex digest of a file, read in chunks (large files are never held in memory)."""
    return _digest(Path(path), "sha1")


def _expected(sha1: str | None, sha256: str | None) -> dict[str, str]:
    return {name: value.lower() for name, value in (("sha1", sha1), ("sha256", sha256)) if value}


def _has_digests(path: Path, expected: dict[str, str]) -> bool:
    return all(_digest(path, algorithm) == value for algorithm, value in expected.items())


def download(
    url: str,
    destination: str | os.PathLike[str],
    sha1: str | None = None,
    sha256: str | None = None,
    *,
    timeout: float = 60.0,
    local_copy: str = "PATH",
) -> Path:
    """Fetch ``url`` into ``destination`` and verify it; return ``destination``.

    Args:
        url: What to fetch; anything :func:`urllib.request.urlopen` opens.
        destination: Where the file ends up; its directory is created if needed.
        sha1, sha256: Expected hex digests (either, both or neither). An existing destination
            with these digests is reused; with no digest given, any existing file is reused.
        timeout: Seconds to wait for the connection and for each read.
        local_copy: What ``--data.path`` should name instead, as messages end ("... pass it
            with --data.path <local_copy>"): ``FILE (a fra-eng.zip or the fra.txt inside it)``.

    Raises:
        DownloadError: the URL cannot be reached or the transfer stops early.
        ChecksumError: the received bytes have another digest than expected.

    Whatever goes wrong, an exception or a ``KeyboardInterrupt``, the temporary file is deleted
    and ``destination`` is left as it was.
    """
    destination = Path(destination)
    expected = _expected(sha1, sha256)
    fix = _local_fix(local_copy)
    if destination.is_file():
        if _has_digests(destination, expected):
            log.info("Using the cached %s", destination)
            return destination
        log.warning("%s does not have the expected checksum; downloading it again from %s", destination, url)
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _stream(url, out, list(expected), timeout, fix)
        for algorithm, value in expected.items():
            if actual[algorithm] != value:
                raise ChecksumError(
                    f"The file downloaded from {url} has {algorithm} {actual[algorithm]}, expected {value}: "
                    f"the download is corrupt or the file at that URL has changed. Delete {destination} "
                    f"if it exists and try again, check the URL, or {fix}."
                )
        os.replace(tmp, destination)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return destination


def _stream(url: str, out: BinaryIO, algorithms: list[str], timeout: float, fix: str) -> dict[str, str]:
    """Copy the body at ``url`` into the binary file ``out``; return its digests by algorithm.
    Failure messages end with ``fix``."""
    hashers = {algorithm: hashlib.new(algorithm) for algorithm in algorithms}
    log.info("Downloading %s", url)
    try:
        response = urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{url} answered HTTP {exc.code} {exc.reason}: check the URL, or {fix}.") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"Could not reach {url} ({reason}). If this machine has no network access, {fix}.") from exc
    with response:
        announced = response.headers.get("Content-Length")
        received = 0
        try:
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                received += len(chunk)
                for hasher in hashers.values():
                    hasher.update(chunk)
        except (http.client.HTTPException, OSError) as exc:
            raise DownloadError(
                f"The download of {url} was interrupted after {received} bytes ({type(exc).__name__}: {exc}). "
                f"Try again, or {fix}."
            ) from exc
    if announced is not None and announced.isdigit() and received != int(announced):
        raise DownloadError(
            f"The download of {url} stopped after {received} of {announced} bytes. Try again, or {fix}."
        )
    return {algorithm: hasher.hexdigest() for algorithm, hasher in hashers.items()}
