"""The style sheet's images are written where no other account can plant anything
(issue 45). Before: ``<temp>/lectern-style-<user>``, a name another account could make
first (a folder it can write, with links at the images' names), made 0755."""

from __future__ import annotations

import getpass
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from desktop.theme import DARK, LIGHT, stylesheet


def test_style_images_are_written_in_a_private_folder_no_one_can_name_first(
    qtbot: Any,
) -> None:
    for palette in (LIGHT, DARK):
        sheet = stylesheet(palette)
        images = [
            Path(part.split(")")[0].strip("\"'"))
            for part in sheet.split("url(")[1:]
            if ".png" in part.split(")")[0]
        ]
        assert images, "the style sheet names no images"
        for image in images:
            assert image.is_file()
            folder = image.parent
            st = folder.lstat()
            assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            assert stat.S_IMODE(st.st_mode) == 0o700
            assert folder != Path(tempfile.gettempdir()) / f"lectern-style-{getpass.getuser()}"
