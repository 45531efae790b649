# Finds the five smallest .txt files one file at a time, then merges them.
listing = list_directory(path=root)
sizes = {}
for line in listing.splitlines():
    if line.startswith("[FILE] ") and line.endswith(".txt"):
        name = line[len("[FILE] ") :]
        info = get_file_info(path=f"{root}/{name}")
        for field in info.splitlines():
            if field.startswith("size:"):
                sizes[name] = int(field.split(":", 1)[1])
smallest = sorted(sizes, key=lambda n: sizes[n])[:5]
parts = [read_text_file(path=f"{root}/{name}") for name in smallest]
write_file(path=f"{root}/merged.txt", content="\n".join(parts))
print("merged", smallest)
