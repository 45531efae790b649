# Reads the papers one by one and files each under its first author.
listing = list_directory(path=f"{root}/papers")
for line in listing.splitlines():
    if not line.startswith("[FILE] "):
        continue
    name = line[len("[FILE] ") :]
    html = read_text_file(path=f"{root}/papers/{name}")
    marker = 'name="citation_author" content="'
    if marker not in html:
        continue
    author = html.split(marker, 1)[1].split('"', 1)[0]
    create_directory(path=f"{root}/{author}")
    write_file(path=f"{root}/{author}/{name}", content=html)
print("done")
