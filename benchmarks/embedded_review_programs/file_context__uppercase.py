# Converts the listed files to upper case; the list file's name is wrong.
names = read_text_file(path=f"{root}/convert.txt").split()
create_directory(path=f"{root}/uppercase")
for name in names:
    text = read_text_file(path=f"{root}/{name}")
    write_file(path=f"{root}/uppercase/{name}", content=text.upper())
print("converted", len(names), "files")
