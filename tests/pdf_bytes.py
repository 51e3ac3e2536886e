"""PDF files written byte by byte for tests: the objects, their cross-reference table and
the trailer (plain PDF syntax, no library)."""

from __future__ import annotations


def pdf_bytes(objects: list[bytes], info: int | None = None) -> bytes:
    """A PDF of ``objects``, numbered from 1 (object 1 is the catalog); ``info``: the number
    of the document information object."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    extra = b" /Info %d 0 R" % info if info is not None else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        extra,
        xref,
    )
    return bytes(out)
