# Reads each draft and collects its section headers; the drafts folder is named in lower case.
drafts = list_directory(path=f"{root}/drafts")
sections = {}
for line in drafts.splitlines():
    if line.startswith("[FILE] ") and line.endswith(".md"):
        name = line[len("[FILE] ") :]
        text = read_text_file(path=f"{root}/drafts/{name}")
        sections[name] = [h for h in text.splitlines() if h.startswith("## ")]
for name, heads in sections.items():
    print(name, len(heads))
