"""What a Weights & Biases run kept offline, read back without syncing it."""

from __future__ import annotations

import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

__all__ = ["wandb_records"]


def wandb_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of an offline run's ``run-<id>.wandb``: W&B's transaction log, in LevelDB's
    log format (a 7-byte file header, then 32 KiB blocks of chunks, each with a 7-byte header:
    CRC-32, length, kind), one protobuf ``Record`` per chunk sequence. W&B 0.31 writes its
    ``files/config.yaml`` and ``files/wandb-summary.json`` only when it syncs, so this is what
    an offline run holds."""
    data, block, position = path.read_bytes(), 32768, 7
    records, pieces = [], b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # no room for a chunk header: the block is padded
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pieces += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records
