"""The block device the host serves over the link (docs/link.md, "What the host does with
it"): the sectors of a packed image, read only, except its checkpoint area, which is the run's
checkpoint held in memory. The user's image file is never written, and every record is checked
(``verify_image``) before the first sector is served: a corrupted image is refused up front."""
from __future__ import annotations

from pathlib import Path

from zocodegen.files import open_input
from zocodegen.formats.image import SECTOR_BYTES, ImageLayout, checkpoint_slot_bytes, verify_image
from zocodegen.formats import link as p
from .link.server import BlockServer


class ImageBlocks(BlockServer):
    def __init__(self, path: Path, checkpoint: bytes = b""):
        self.path = Path(path)
        self.layout: ImageLayout = verify_image(self.path)
        self._file = open_input(self.path, "data image")
        area = self.layout.checkpoint_sectors * SECTOR_BYTES
        self._area = bytearray(area)
        self.set_checkpoint(checkpoint)

    @property
    def checkpoint_capacity(self) -> int:
        return len(self._area)

    def set_checkpoint(self, blob: bytes) -> None:
        """What the device reads from the checkpoint area (zeros after it)."""
        if len(blob) > len(self._area):
            raise ValueError(f"a checkpoint of {len(blob)} bytes does not fit the image's "
                             f"checkpoint area of {len(self._area)} bytes")
        self._area[:] = bytes(len(self._area))
        self._area[:len(blob)] = blob

    def checkpoint(self, size: int) -> bytes:
        """The first ``size`` bytes the device wrote into the checkpoint area."""
        return bytes(self._area[:size])

    def best(self, largest: int, size: int) -> bytes:
        """The best validated parameters the device keeps in the guard's slot, which follows
        the slot of the firmware's ``largest`` checkpoint (zo_train_io.h)."""
        start = checkpoint_slot_bytes(largest)
        return bytes(self._area[start:start + size])

    def set_best(self, largest: int, blob: bytes) -> None:
        start = checkpoint_slot_bytes(largest)
        self._area[start:start + len(blob)] = blob

    def _area_offset(self, lba: int, count: int) -> int | None:
        first = self.layout.checkpoint_lba
        if first <= lba and lba + count <= first + self.layout.checkpoint_sectors:
            return (lba - first) * SECTOR_BYTES
        return None

    def read(self, lba: int, count: int) -> tuple[int, bytes]:
        if lba + count > self.layout.image_sectors:
            return p.STATUS_RANGE, b""
        offset = self._area_offset(lba, count)
        if offset is not None:
            return p.STATUS_OK, bytes(self._area[offset:offset + count * SECTOR_BYTES])
        self._file.seek(lba * SECTOR_BYTES)
        data = self._file.read(count * SECTOR_BYTES)
        return (p.STATUS_OK, data) if len(data) == count * SECTOR_BYTES else (p.STATUS_RANGE,
                                                                               b"")

    def write(self, lba: int, count: int, data: bytes) -> int:
        offset = self._area_offset(lba, count)
        if offset is None:
            return p.STATUS_READ_ONLY
        self._area[offset:offset + len(data)] = data
        return p.STATUS_OK

    def close(self) -> None:
        self._file.close()
