"""Third-party licence notices for everything Lectern ships.

The list is derived, not hand-kept: it is the closure of Lectern's declared dependencies
in the installed package metadata, so a new dependency brings its notice along. The
packaging script writes it to ``THIRD_PARTY_NOTICES.txt`` inside the bundle (the frozen
app has no package metadata to read); a source checkout builds it on the fly. The About
dialog shows whichever applies.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from core import __version__

NOTICES_FILE = "THIRD_PARTY_NOTICES.txt"
ROOT_DISTRIBUTION = "lectern"
LICENCE_FILE_MARKERS = ("LICEN", "COPYING", "NOTICE")
# Debian keeps the common licence texts here; used when a wheel names a licence but
# ships no text for it (PySide6, tokenizers).
COMMON_LICENCES = Path("/usr/share/common-licenses")
SPDX_TO_COMMON = {
    "Apache-2.0": "Apache-2.0",
    "LGPL-3.0-only": "LGPL-3",
    "GPL-3.0": "GPL-3",
    "GPL-2.0-only": "GPL-2",
    "GPL-2.0-or-later": "GPL-2",
    "MPL-2.0": "MPL-2.0",
}
# Licences of parts that are not Python distributions, or whose metadata says too little.
EXTRA_LICENCES = {
    "pyside6-essentials": "LGPL-3.0-only (Qt for Python and the Qt libraries it carries)",
    "tokenizers": "Apache-2.0",
}


# Native libraries that wheels carry inside them (auditwheel's ``<name>.libs`` folder):
# their metadata names only the Python wrapper's licence. (distribution, library, licence,
# home page).
CARRIED_LIBRARIES = (
    ("tesserocr", "Tesseract OCR 5.5", "Apache-2.0", "https://github.com/tesseract-ocr/tesseract"),
    ("tesserocr", "Leptonica 1.8", "BSD-2-Clause", "http://www.leptonica.org"),
    ("tesserocr", "libtiff 4", "libtiff (BSD-like)", "https://libtiff.gitlab.io/libtiff/"),
    ("tesserocr", "libpng 1.6", "libpng-2.0", "http://www.libpng.org/pub/png/libpng.html"),
    ("tesserocr", "libjpeg-turbo", "IJG and BSD-3-Clause", "https://libjpeg-turbo.org"),
    ("tesserocr", "libwebp", "BSD-3-Clause", "https://chromium.googlesource.com/webm/libwebp"),
    ("tesserocr", "JBIG-KIT", "GPL-2.0-or-later", "https://www.cl.cam.ac.uk/~mgk25/jbigkit/"),
)


@dataclass(frozen=True)
class Notice:
    name: str
    version: str
    licence: str
    homepage: str
    texts: tuple[tuple[str, str], ...]  # (file name, full text)


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# Required by a dependency but left out of the bundle (packaging/lectern.spec excludes
# their modules): the model package asks for sentence-transformers, which brings the
# rest; Lectern loads the model through transformers alone (core/embedding/models.py). Their
# own requirements are followed only if something shipped needs them too.
NOT_BUNDLED = frozenset(
    {"sentence-transformers", "scikit-learn", "scipy", "joblib", "threadpoolctl", "narwhals"}
)


def shipped_distributions(root: str = ROOT_DISTRIBUTION) -> list[metadata.Distribution]:
    """Every installed distribution Lectern ships, directly or not (not Lectern)."""
    seen: dict[str, metadata.Distribution] = {}
    pending = [Requirement(r).name for r in metadata.requires(root) or ()]
    while pending:
        name = _canonical(pending.pop())
        if name in seen or name in NOT_BUNDLED:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency of a dependency that is not installed
        seen[name] = distribution
        for raw in distribution.requires or ():
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [seen[name] for name in sorted(seen)]


def _field(meta: metadata.PackageMetadata, name: str) -> str:
    # PackageMetadata is typed as a protocol without ``get``; a missing field is None.
    value = meta.get_all(name)
    return str(value[0]) if value else ""


def _licence_name(distribution: metadata.Distribution) -> str:
    meta = distribution.metadata
    name = _canonical(meta["Name"])
    if name in EXTRA_LICENCES:
        return EXTRA_LICENCES[name]
    expression = _field(meta, "License-Expression")
    if expression:
        return expression
    declared = _field(meta, "License").strip()
    if declared and "\n" not in declared and len(declared) < 80:
        return declared
    classifiers = [
        c.split(" :: ")[-1] for c in meta.get_all("Classifier") or () if c.startswith("License ::")
    ]
    return ", ".join(classifiers) or "see the project"


def _homepage(distribution: metadata.Distribution) -> str:
    meta = distribution.metadata
    if _field(meta, "Home-page"):
        return _field(meta, "Home-page")
    for entry in meta.get_all("Project-URL") or ():
        label, _, url = entry.partition(",")
        if label.strip().lower() in {"homepage", "home", "source", "repository", "source code"}:
            return str(url).strip()
    return ""


def _licence_texts(
    distribution: metadata.Distribution, licence: str
) -> tuple[tuple[str, str], ...]:
    texts: list[tuple[str, str]] = []
    for file in distribution.files or ():
        parts = file.parts
        # Only the dist-info's own files: vendored copies deep in a package are covered
        # by the package's top-level notice (torch lists its third parties there).
        if not parts or not parts[0].endswith(".dist-info"):
            continue
        if not any(marker in file.name.upper() for marker in LICENCE_FILE_MARKERS):
            continue
        if len(parts) > 3:  # torch's hundreds of third_party/*/LICENSE files
            continue
        try:
            texts.append(("/".join(parts[1:]), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(texts) or _common_licence_text(licence)


def _common_licence_text(licence: str) -> tuple[tuple[str, str], ...]:
    """The system's copy of a well-known licence's text, when it has one."""
    for spdx, common in SPDX_TO_COMMON.items():
        path = COMMON_LICENCES / common
        if spdx in licence and path.is_file():
            return ((common, path.read_text(encoding="utf-8", errors="replace")),)
    return ()


def collect_notices() -> list[Notice]:
    notices = [
        Notice(
            "Python",
            sys.version.split()[0],
            "PSF-2.0",
            "https://www.python.org",
            _python_licence(),
        )
    ]
    for distribution in shipped_distributions():
        licence = _licence_name(distribution)
        notices.append(
            Notice(
                distribution.metadata["Name"],
                distribution.version,
                licence,
                _homepage(distribution),
                _licence_texts(distribution, licence),
            )
        )
    shipped = {_canonical(d.metadata["Name"]) for d in shipped_distributions()}
    for owner, name, licence, home in CARRIED_LIBRARIES:
        if owner in shipped:
            texts = _common_licence_text(licence)
            notices.append(Notice(f"{name} (inside {owner})", "", licence, home, texts))
    notices.append(
        Notice(
            "all-MiniLM-L6-v2 (embedding model weights)",
            "sentence-transformers",
            "Apache-2.0",
            "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
            (),
        )
    )
    return notices


def _python_licence() -> tuple[tuple[str, str], ...]:
    path = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if path.is_file():
        return (("LICENSE.txt", path.read_text(encoding="utf-8", errors="replace")),)
    return ()


def render_notices(notices: list[Notice]) -> str:
    lines = [
        f"Lectern {__version__} includes the following third-party software.",
        "",
    ]
    for notice in notices:
        lines.append(f"- {notice.name} {notice.version}: {notice.licence}")
    for notice in notices:
        lines += ["", "=" * 78, f"{notice.name} {notice.version}", f"Licence: {notice.licence}"]
        if notice.homepage:
            lines.append(f"Home: {notice.homepage}")
        for file_name, text in notice.texts:
            lines += ["", f"--- {file_name} ---", text.rstrip()]
    return "\n".join(lines) + "\n"


def notices_text() -> str:
    """The notices of this installation: the bundled file when frozen, else from metadata."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        path = Path(bundle) / NOTICES_FILE
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return render_notices(collect_notices())
