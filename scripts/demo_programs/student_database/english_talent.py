# Frozen source program (a fixture of the main job): it reads every student's two files one
# call at a time, so it needs 2 + 2 x 25 = 52 tool calls; the demo allows 30.
root = "/workspace"
listing = list_directory(path=f"{root}/students")
folders = [line[len("[DIR] "):] for line in listing.splitlines() if line.startswith("[DIR] ")]
print(f"{len(folders)} students: {2 * len(folders)} files to read; this run allows 30 tool calls")


def fields(text):
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def qualifies(info, letter):
    score = int(fields(info)["English score"])
    return score >= 90 and "talent in English as exceptional" in letter


rows = ["student_id,name"]
for folder in folders:
    info = read_text_file(path=f"{root}/students/{folder}/basic_info.txt")
    letter = read_text_file(path=f"{root}/students/{folder}/recommendation_letter.txt")
    if qualifies(info, letter):
        rows.append(f"{fields(info)['Student ID']},{fields(info)['Name']}")
write_file(path=f"{root}/english_talent.csv", content="\n".join(rows) + "\n")
print(f"{len(rows) - 1} students selected")
