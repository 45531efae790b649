# Moves every download into a folder by extension; images go to a wrong destination.
listing = list_directory(path=f"{root}/Downloads")
folders = {"pdf": "Documents", "txt": "Documents", "jpg": "Picture", "png": "Picture"}
for line in listing.splitlines():
    if not line.startswith("[FILE] "):
        continue
    name = line[len("[FILE] ") :]
    ext = name.rsplit(".", 1)[-1].lower()
    folder = folders.get(ext, "Other")
    create_directory(path=f"{root}/Arranged/{folder}")
    move_file(source=f"{root}/Downloads/{name}", destination=f"{root}/Arranged/{folder}/{name}")
print("arranged")
