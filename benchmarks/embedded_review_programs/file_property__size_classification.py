# Walks inbox/ folder by folder and sorts files by size; the small-files folder name is wrong.
pending = [f"{root}/inbox"]
files = []
while pending:
    folder = pending.pop()
    for line in list_directory(path=folder).splitlines():
        if line.startswith("[DIR] "):
            pending.append(f"{folder}/{line[6:]}")
        elif line.startswith("[FILE] "):
            files.append(f"{folder}/{line[7:]}")
create_directory(path=f"{root}/smal")
create_directory(path=f"{root}/large")
for path in files:
    info = get_file_info(path=path)
    size = int([f for f in info.splitlines() if f.startswith("size:")][0].split(":")[1])
    target = "smal" if size < 10240 else "large"
    move_file(source=path, destination=f"{root}/{target}/{path.rsplit('/', 1)[1]}")
print("sorted", len(files), "files")
