#!/bin/sh
# Adds Lectern to the application menu of the current user (no root needed).
# Run it from the unpacked Lectern folder; run it again after moving the folder.
# `./install.sh --uninstall` removes the menu entry and the icon again.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
entry="$data/applications/lectern.desktop"
icon="$data/icons/hicolor/scalable/apps/lectern.svg"

if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$entry" "$icon"
    echo "Removed Lectern from the application menu. Your library is kept."
    exit 0
fi

mkdir -p "$(dirname "$entry")" "$(dirname "$icon")"
cp "$here/lectern.svg" "$icon"
sed "s|^Exec=Lectern|Exec=\"$here/Lectern\"|" "$here/lectern.desktop" > "$entry"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$data/applications" || true
echo "Lectern is in your application menu (entry: $entry)."
